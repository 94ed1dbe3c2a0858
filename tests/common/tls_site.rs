//! An HTTPS site on 127.0.0.1 under a public-looking host name: a test CA (rcgen) signs a
//! leaf for the names; the server is reached through the fetcher's test seams
//! (FACTOMAT_UNSAFE_TEST_CONNECT_TO / FACTOMAT_UNSAFE_TEST_CA). Nothing leaves loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::temp_path;

/// One answer of the site.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub delay: Option<Duration>,
}

impl Reply {
    pub fn new(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::default()
        }
    }
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Reply {
        self.body = body.into();
        self
    }
}

/// A request the site saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A test CA (its PEM written to a temp file) and a leaf for `hosts` signed by it.
pub struct Pki {
    pub ca_path: PathBuf,
    pub hosts: Vec<String>,
    pub leaf_pem: String,
    pub key_pem: String,
    pub leaf_der: rustls::pki_types::CertificateDer<'static>,
    pub key_der: Vec<u8>,
}

impl Pki {
    pub fn new(hosts: &[&str]) -> Pki {
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
        let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let leaf = rcgen::CertificateParams::new(names.clone())
            .expect("leaf")
            .signed_by(&leaf_key, &issuer)
            .expect("leaf cert");
        let ca_path = temp_path("test-ca.pem");
        std::fs::write(&ca_path, ca_cert.pem()).expect("ca file");
        Pki {
            ca_path,
            hosts: names,
            leaf_pem: leaf.pem(),
            key_pem: leaf_key.serialize_pem(),
            leaf_der: leaf.der().clone(),
            key_der: leaf_key.serialize_der(),
        }
    }

    /// The server environment that routes the hosts to `addr` and trusts the CA.
    pub fn env(&self, addr: SocketAddr) -> Vec<(String, String)> {
        let connect = self
            .hosts
            .iter()
            .map(|h| format!("{h}={addr}"))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            ("FACTOMAT_UNSAFE_TEST_CONNECT_TO".into(), connect),
            (
                "FACTOMAT_UNSAFE_TEST_CA".into(),
                self.ca_path.display().to_string(),
            ),
        ]
    }
}

pub type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

pub struct TlsSite {
    pub addr: SocketAddr,
    pub ca_path: PathBuf,
    pub hosts: Vec<String>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl TlsSite {
    /// Starts the site for `hosts` with `handler`.
    pub async fn start(hosts: &[&str], handler: Handler) -> TlsSite {
        let pki = Pki::new(hosts);
        let ca_path = pki.ca_path.clone();
        let names = pki.hosts.clone();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![pki.leaf_der.clone()],
                rustls::pki_types::PrivatePkcs8KeyDer::from(pki.key_der.clone()).into(),
            )
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let handler = handler.clone();
                            let log = log.clone();
                            async move { Ok::<_, hyper::Error>(answer(request, &handler, &log).await) }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsSite {
            addr,
            ca_path,
            hosts: names,
            seen,
        }
    }

    /// The server environment that routes the site's hosts here and trusts its CA.
    pub fn env(&self) -> Vec<(String, String)> {
        let connect = self
            .hosts
            .iter()
            .map(|h| format!("{h}={}", self.addr))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            ("FACTOMAT_UNSAFE_TEST_CONNECT_TO".into(), connect),
            (
                "FACTOMAT_UNSAFE_TEST_CA".into(),
                self.ca_path.display().to_string(),
            ),
        ]
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }
}

async fn answer(
    request: hyper::Request<hyper::body::Incoming>,
    handler: &Handler,
    log: &Arc<Mutex<Vec<Seen>>>,
) -> hyper::Response<Full<Bytes>> {
    let method = request.method().to_string();
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let headers = request
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let seen = Seen {
        method,
        path,
        headers,
        body,
    };
    log.lock().expect("log").push(seen.clone());
    let reply = handler(&seen);
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut builder = hyper::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Full::new(Bytes::from(reply.body)))
        .expect("response")
}
