//! TLS to PostgreSQL with libpq's `sslmode` meanings, over rustls.
//!
//! tokio-postgres parses only `disable`, `prefer` and `require`, and refuses `sslrootcert`;
//! both are read here from the database URL and taken out before it parses the rest.
//!
//! | `sslmode` | encrypted | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | when the server offers TLS | not checked |
//! | `require` | always | not checked (checked as `verify-ca` when `sslrootcert` is given, as libpq does) |
//! | `verify-ca` | always | chains to `sslrootcert` |
//! | `verify-full` | always | chains to `sslrootcert` and names the host |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the platform's roots.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::{Host, SslMode as WireMode};
use tokio_postgres_rustls::MakeRustlsConnect;

/// What is wrong with a database URL's TLS settings (found before anything connects).
#[derive(Debug, thiserror::Error)]
pub enum TlsSettingError {
    /// `sslmode` names no mode libpq knows.
    #[error("sslmode={0} is not one of disable, prefer, require, verify-ca, verify-full")]
    UnknownMode(String),
    /// A verifying mode without a CA to verify against.
    #[error(
        "sslmode={0} needs sslrootcert: the path of a PEM file of the CA that signed the server's certificate, or `system` for this machine's roots"
    )]
    NoRootCert(SslMode),
    /// The `sslrootcert` file cannot be read or holds no certificate.
    #[error("sslrootcert={path}: {why}")]
    RootCert {
        /// The configured path.
        path: String,
        /// Why it cannot be used.
        why: String,
    },
}

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it; the certificate is not checked.
    Prefer,
    /// Always TLS; the certificate is not checked.
    Require,
    /// Always TLS; the certificate chains to `sslrootcert`.
    VerifyCa,
    /// Always TLS; the certificate chains to `sslrootcert` and names the host.
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<SslMode, TlsSettingError> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(TlsSettingError::UnknownMode(other.to_string())),
        })
    }

    /// The mode tokio-postgres negotiates with (it knows no verifying modes: the verifier
    /// does that part).
    fn on_the_wire(self) -> WireMode {
        match self {
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// The TLS settings a database URL carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `sslmode` (default `prefer`), after libpq's `require` + `sslrootcert` rule.
    pub mode: SslMode,
    /// `sslrootcert`, as given.
    pub root_cert: Option<String>,
}

impl fmt::Display for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sslmode={}", self.mode)?;
        if let Some(root) = &self.root_cert {
            write!(f, ", sslrootcert={root}")?;
        }
        Ok(())
    }
}

/// A PostgreSQL URL split into what tokio-postgres parses and our TLS settings.
pub struct Connection {
    /// The URL without `sslmode` and `sslrootcert`.
    pub url: String,
    /// The TLS settings taken out of it.
    pub settings: TlsSettings,
}

/// Takes `sslmode` and `sslrootcert` out of a PostgreSQL URL; None when it does not parse as
/// a URL (tokio-postgres then reports it).
pub fn split(database_url: &str) -> Result<Option<Connection>, TlsSettingError> {
    let Ok(mut url) = url::Url::parse(database_url) else {
        return Ok(None);
    };
    let (mut mode, mut root_cert) = (None, None);
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter_map(|(key, value)| match key.as_ref() {
            "sslmode" => {
                mode = Some(value.into_owned());
                None
            }
            "sslrootcert" => {
                root_cert = Some(value.into_owned());
                None
            }
            _ => Some((key.into_owned(), value.into_owned())),
        })
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
    let mut mode = mode
        .as_deref()
        .map_or(Ok(SslMode::Prefer), SslMode::parse)?;
    if mode == SslMode::Require && root_cert.is_some() {
        mode = SslMode::VerifyCa;
    }
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
        return Err(TlsSettingError::NoRootCert(mode));
    }
    Ok(Some(Connection {
        url: url.to_string(),
        settings: TlsSettings { mode, root_cert },
    }))
}

/// The TLS settings a database URL makes, in words for a message (`sslmode=prefer` when
/// it names none).
pub fn described(database_url: &str) -> String {
    match split(database_url) {
        Ok(Some(connection)) => connection.settings.to_string(),
        Ok(None) => "no TLS settings".into(),
        Err(error) => error.to_string(),
    }
}

/// Applies the settings to a parsed config and builds the connector they need.
pub fn connector(
    settings: &TlsSettings,
    config: &mut tokio_postgres::Config,
) -> Result<MakeRustlsConnect, TlsSettingError> {
    config.ssl_mode(settings.mode.on_the_wire());
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let below = |chain| BelowVerifyFull {
        chain,
        algorithms: provider.signature_verification_algorithms,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match settings.mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Arc::new(below(None)),
        SslMode::VerifyCa => Arc::new(below(Some(web_pki(settings, &provider)?))),
        SslMode::VerifyFull => web_pki(settings, &provider)?,
    };
    let tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSettingError::RootCert {
            path: settings.root_cert.clone().unwrap_or_default(),
            why: e.to_string(),
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(tls))
}

/// The TCP hosts that are not loopback: below `verify-full`, a connection to one can be
/// intercepted.
pub fn remote_hosts(config: &tokio_postgres::Config) -> Vec<String> {
    config
        .get_hosts()
        .iter()
        .filter_map(|host| match host {
            Host::Tcp(name) if !is_loopback(name) => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn web_pki(
    settings: &TlsSettings,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, TlsSettingError> {
    let path = settings.root_cert.clone().unwrap_or_default();
    let refused = |why: String| TlsSettingError::RootCert {
        path: path.clone(),
        why,
    };
    let roots = Arc::new(root_store(&path).map_err(refused)?);
    WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| refused(e.to_string()))
}

/// The CA certificates `sslrootcert` names.
fn root_store(path: &str) -> Result<RootCertStore, String> {
    let certificates: Vec<CertificateDer<'static>> = if path == "system" {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            return Err(format!("no system root certificates: {:?}", found.errors));
        }
        found.certs
    } else {
        let file = PathBuf::from(path);
        let bytes = std::fs::read(&file).map_err(|e| format!("cannot be read: {e}"))?;
        CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("is not a PEM certificate file: {e}"))?
    };
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certificates);
    if added == 0 {
        return Err("holds no usable CA certificate".into());
    }
    Ok(store)
}

/// `prefer` and `require` (no chain: the certificate is taken as presented, libpq's meaning)
/// and `verify-ca` (the chain must lead to `sslrootcert`; the name it was issued for is not
/// compared with the host). Either way the handshake's signatures are checked, so the key
/// exchange is with the holder of the presented certificate.
#[derive(Debug)]
struct BelowVerifyFull {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for BelowVerifyFull {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// True when an error (or one it wraps) is the server's certificate failing our check.
pub fn is_certificate_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(rustls::Error::InvalidCertificate(_)) = error.downcast_ref::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            && matches!(inner, rustls::Error::InvalidCertificate(_))
        {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> TlsSettings {
        split(url).expect("valid").expect("a URL").settings
    }

    #[test]
    fn the_default_is_prefer_and_our_keys_leave_the_url() {
        assert_eq!(settings("postgres://u@db/x").mode, SslMode::Prefer);
        let connection = split(
            "postgres://u:p@db:5432/x?application_name=a&sslmode=verify-full&sslrootcert=%2Fca.pem",
        )
        .expect("valid")
        .expect("a URL");
        assert_eq!(
            connection.url,
            "postgres://u:p@db:5432/x?application_name=a"
        );
        assert_eq!(
            connection.settings,
            TlsSettings {
                mode: SslMode::VerifyFull,
                root_cert: Some("/ca.pem".into())
            }
        );
    }

    #[test]
    fn libpq_modes_and_rules() {
        assert_eq!(
            settings("postgres://db/x?sslmode=disable").mode,
            SslMode::Disable
        );
        assert_eq!(
            settings("postgres://db/x?sslmode=require").mode,
            SslMode::Require
        );
        // libpq: `require` with a root certificate verifies the chain.
        assert_eq!(
            settings("postgres://db/x?sslmode=require&sslrootcert=/ca.pem").mode,
            SslMode::VerifyCa
        );
        assert!(matches!(
            split("postgres://db/x?sslmode=verify-full"),
            Err(TlsSettingError::NoRootCert(SslMode::VerifyFull))
        ));
        assert!(matches!(
            split("postgres://db/x?sslmode=allow-maybe"),
            Err(TlsSettingError::UnknownMode(_))
        ));
    }

    #[test]
    fn a_missing_ca_file_names_the_setting() {
        let error = connector(
            &TlsSettings {
                mode: SslMode::VerifyFull,
                root_cert: Some("/nonexistent/ca.pem".into()),
            },
            &mut tokio_postgres::Config::new(),
        )
        .err()
        .expect("refused");
        assert!(
            error
                .to_string()
                .starts_with("sslrootcert=/nonexistent/ca.pem: cannot be read"),
            "{error}"
        );
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        let config: tokio_postgres::Config = "postgres://u@localhost,127.0.0.1,[::1],db.example/x"
            .parse()
            .expect("config");
        assert_eq!(remote_hosts(&config), vec!["db.example".to_string()]);
    }
}
