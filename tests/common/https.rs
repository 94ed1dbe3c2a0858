//! The one HTTPS test origin on 127.0.0.1 (fetch, web and x402 seller tests): a CA generated
//! at test time (rcgen), leaf certificates for public-looking names, hyper HTTP/1.1 over
//! tokio-rustls, and a per-test handler. The service reaches it only through the test seams
//! FACTOMAT_UNSAFE_TEST_CONNECT_TO / FACTOMAT_UNSAFE_TEST_CA. Nothing leaves loopback.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::temp_path;

/// A certificate authority that exists only for one test process.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA certificate as PEM, for FACTOMAT_UNSAFE_TEST_CA.
    pub pem_path: PathBuf,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            DnType::CommonName,
            "factomat test CA (generated per test run)",
        );
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer =
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        let pem_path = temp_path("test-ca.pem");
        std::fs::write(&pem_path, issuer.pem()).expect("write CA");
        TestCa { issuer, pem_path }
    }

    /// A leaf certificate for `names`, signed by this CA.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().expect("key");
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Leaf { cert, key }
    }

    /// A rustls server configuration presenting a leaf for `names`, signed by this CA.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let leaf = self.leaf(names);
        let chain = vec![leaf.cert.der().clone(), self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server config");
        Arc::new(config)
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The server environment that routes each `(host, addr)` there and trusts this CA.
    pub fn env(&self, routes: &[(&str, SocketAddr)]) -> Vec<(String, String)> {
        let connect = routes
            .iter()
            .map(|(host, addr)| format!("{host}={addr}"))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            ("FACTOMAT_UNSAFE_TEST_CONNECT_TO".into(), connect),
            (
                "FACTOMAT_UNSAFE_TEST_CA".into(),
                self.pem_path.display().to_string(),
            ),
        ]
    }
}

/// A leaf certificate and its key, for servers that are not [`Site`] (e.g. a node seller).
pub struct Leaf {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Leaf {
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

/// What the origin saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub host: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// How the origin answers.
pub enum Reply {
    /// A complete response.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Headers at once, then `chunk` every `every`, `count` times (slow drip).
    Drip {
        headers: Vec<(String, String)>,
        chunk: Vec<u8>,
        every: Duration,
        count: usize,
    },
    /// `reply`, but only after `delay` (a slow origin).
    Late(Duration, Box<Reply>),
}

impl Reply {
    /// An empty answer with `status`; add to it with [`Reply::header`] and [`Reply::body`].
    pub fn new(status: u16) -> Reply {
        Reply::Full {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(self, name: &str, value: &str) -> Reply {
        match self {
            Reply::Full {
                status,
                mut headers,
                body,
            } => {
                headers.push((name.into(), value.into()));
                Reply::Full {
                    status,
                    headers,
                    body,
                }
            }
            Reply::Late(delay, reply) => Reply::Late(delay, Box::new(reply.header(name, value))),
            drip @ Reply::Drip { .. } => drip,
        }
    }

    /// Replaces the body of a complete answer (a delayed one too).
    pub fn body(self, new: impl Into<Vec<u8>>) -> Reply {
        match self {
            Reply::Full {
                status, headers, ..
            } => Reply::Full {
                status,
                headers,
                body: new.into(),
            },
            Reply::Late(delay, reply) => Reply::Late(delay, Box::new(reply.body(new))),
            drip @ Reply::Drip { .. } => drip,
        }
    }

    /// `self`, sent only after `delay`.
    pub fn after(self, delay: Duration) -> Reply {
        Reply::Late(delay, Box::new(self))
    }

    /// No answer at all for `delay`, then a tiny page.
    pub fn stall(delay: Duration) -> Reply {
        Reply::new(200).body("<p>late</p>").after(delay)
    }

    pub fn html(body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full {
            status: 200,
            headers: vec![("content-type".into(), "text/html; charset=utf-8".into())],
            body: body.into(),
        }
    }

    pub fn redirect(status: u16, location: &str) -> Reply {
        Reply::Full {
            status,
            headers: vec![("location".into(), location.into())],
            body: Vec::new(),
        }
    }
}

pub type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A running origin.
pub struct Site {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Site {
    /// Serves `handler` over TLS on 127.0.0.1:0 with `config`.
    pub async fn start(config: Arc<rustls::ServerConfig>, handler: Handler) -> Site {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let log = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let handler = handler.clone();
                        let log = log.clone();
                        async move { Ok::<_, Infallible>(answer(request, &handler, &log).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Site { addr, seen, task }
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    pub fn hits(&self) -> usize {
        self.seen.lock().expect("seen").len()
    }
}

type ResponseBody = BoxBody<Bytes, Infallible>;

async fn answer(
    request: hyper::Request<hyper::body::Incoming>,
    handler: &Handler,
    log: &Arc<Mutex<Vec<Seen>>>,
) -> hyper::Response<ResponseBody> {
    let seen = seen(request).await;
    log.lock().expect("log").push(seen.clone());
    send(handler(&seen)).await
}

/// What the origin records of `request`.
async fn seen(request: hyper::Request<hyper::body::Incoming>) -> Seen {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes().to_vec())
        .unwrap_or_default();
    Seen {
        method: parts.method.to_string(),
        host: parts
            .headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect(),
        body,
    }
}

async fn send(reply: Reply) -> hyper::Response<ResponseBody> {
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => response(status, &headers, full(body)),
        Reply::Drip {
            headers,
            chunk,
            every,
            count,
        } => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
            tokio::spawn(async move {
                for _ in 0..count {
                    if tx.send(Bytes::from(chunk.clone())).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(every).await;
                }
            });
            response(200, &headers, ChannelBody(rx).boxed())
        }
        Reply::Late(delay, reply) => {
            tokio::time::sleep(delay).await;
            Box::pin(send(*reply)).await
        }
    }
}

fn full(body: Vec<u8>) -> ResponseBody {
    http_body_util::Full::new(Bytes::from(body)).boxed()
}

fn response(
    status: u16,
    headers: &[(String, String)],
    body: ResponseBody,
) -> hyper::Response<ResponseBody> {
    let mut builder = hyper::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder.body(body).expect("response")
}

/// A body fed by a channel, for slow-drip answers.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// gzip of `bytes` (for compressed pages and the compression bomb).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}
