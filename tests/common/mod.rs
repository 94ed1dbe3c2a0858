//! Shared harness of the black-box tests: the real server on loopback, a real HTTP client.
// Each test crate includes this module with `mod common;`: its items are `pub` for that crate.
#![allow(unreachable_pub)]
#![allow(dead_code)]

pub mod cdp;
pub mod closing_relay;
pub mod devstack;
pub mod evidence;
pub mod facilitator_proxy;
pub mod https;
pub mod ledgers;
pub mod logs;
pub mod onchain;
pub mod paid_rig;
pub mod postgres;
pub mod replica;
pub mod rpc_proxy;

use std::path::PathBuf;
use std::sync::LazyLock;

use base64::Engine as _;
use factomat::config::Config;
use factomat::http::server::{self, RunningServer};
use serde_json::Value;

/// A payee for tests (anvil account #2).
pub const PAY_TO: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
/// The base URL the test servers publish, deliberately not their listen address.
pub const BASE_URL: &str = "https://factomat.test.example";

/// Every provider key, each on the closed loopback port 9: every machine is ready for sale,
/// and a test that reaches one by mistake gets a refused connection, never the internet.
pub const ALL_PROVIDERS: &[(&str, &str)] = &[
    (
        "FACTOMAT_RPC_URL_EIP155_8453",
        "http://127.0.0.1:9/rpc-8453",
    ),
    ("FACTOMAT_RPC_URL_EIP155_1", "http://127.0.0.1:9/rpc-1"),
    (
        "FACTOMAT_INVENTORY_URL_EIP155_1",
        "http://127.0.0.1:9/inventory-1",
    ),
    (
        "FACTOMAT_INVENTORY_URL_EIP155_8453",
        "http://127.0.0.1:9/inventory-8453",
    ),
    ("FACTOMAT_DEXSCREENER_URL", "http://127.0.0.1:9/dexscreener"),
    ("FACTOMAT_LIDO_API_URL", "http://127.0.0.1:9/lido"),
    ("FACTOMAT_DISCOVERY_URL", "http://127.0.0.1:9/discovery"),
];

pub struct TestServer {
    pub server: RunningServer,
    pub url: String,
    pub client: reqwest::Client,
}

impl TestServer {
    /// Starts a server with a payee and every machine's providers configured (on a closed
    /// loopback port: an unpaid request never reaches them).
    pub async fn start() -> TestServer {
        let mut env = vec![("FACTOMAT_PAY_TO", PAY_TO), ("FACTOMAT_BASE_URL", BASE_URL)];
        env.extend_from_slice(ALL_PROVIDERS);
        TestServer::with_env(&env).await
    }

    pub async fn with_env(pairs: &[(&str, &str)]) -> TestServer {
        let mut env: Vec<(String, String)> = vec![
            ("FACTOMAT_LISTEN".into(), "127.0.0.1:0".into()),
            (
                "FACTOMAT_DATABASE_URL".into(),
                format!("sqlite:{}", temp_path("ledger.db").display()),
            ),
            // No captured sample unless a test stores one: never one from the working directory.
            (
                "FACTOMAT_SAMPLE_PATH".into(),
                temp_path("sample.json").display().to_string(),
            ),
            // One sealing secret per test binary, as replicas of one deployment share it.
            (
                "FACTOMAT_DELIVERY_KEY_FILE".into(),
                delivery_key_file().display().to_string(),
            ),
            // The reconcile pass only where a test turns it on: a row a test leaves undecided
            // stays so until the test asks.
            ("FACTOMAT_RECONCILE_INTERVAL_SECONDS".into(), "0".into()),
        ];
        env.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = Config::from_env(env).expect("test configuration is valid");
        let server = server::start(config).await.expect("server starts");
        let url = format!("http://{}", server.addr);
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        TestServer {
            server,
            url,
            client,
        }
    }

    pub fn outbound(&self) -> u64 {
        self.server.state.gateway.outbound_requests()
    }

    /// [`TestServer::outbound`] less the requests sent once more because the upstream closed
    /// a kept-alive connection as we wrote (the facilitator's 5 s idle timer, under a loaded
    /// machine): what the calls themselves asked for.
    pub fn outbound_asked(&self) -> u64 {
        let gateway = &self.server.state.gateway;
        gateway.outbound_requests() - gateway.resent_requests()
    }

    /// `http://` and the admin listener's address (`FACTOMAT_ADMIN_LISTEN` must be set).
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.server.admin_addr.expect("admin listener"))
    }

    /// A GET on the admin listener.
    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.admin_url()))
            .send()
            .await
            .expect("admin GET answered")
    }

    /// The admin listener's `/metrics` exposition.
    pub async fn admin_metrics(&self) -> String {
        self.admin_get("/metrics").await.text().await.expect("text")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("GET answered")
    }

    /// A GET whose answer is read as JSON (a free document, `/health`).
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path)
            .await
            .json()
            .await
            .unwrap_or_else(|e| panic!("{path} answers JSON: {e}"))
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post_raw(path, serde_json::to_vec(body).expect("json"))
            .await
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("POST answered")
    }

    /// The PAYMENT-REQUIRED header and JSON body of an unpaid POST of `body` (asserts the 402).
    pub async fn challenge(&self, path: &str, body: &Value) -> (String, Value) {
        let response = self.post_json(path, body).await;
        assert_eq!(response.status().as_u16(), 402, "an unpaid POST of {body}");
        let header = response.headers()["payment-required"]
            .to_str()
            .expect("ascii")
            .to_string();
        (header, response.json().await.expect("402 body"))
    }

    /// A paid POST: `body` with the PAYMENT-SIGNATURE `header`.
    pub async fn post_paid(&self, path: &str, body: &Value, header: &str) -> reqwest::Response {
        self.post_paid_raw(path, serde_json::to_vec(body).expect("json"), header)
            .await
    }

    /// A paid POST of exactly these body bytes.
    pub async fn post_paid_raw(
        &self,
        path: &str,
        body: Vec<u8>,
        header: &str,
    ) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .header("PAYMENT-SIGNATURE", header)
            .body(body)
            .send()
            .await
            .expect("paid POST answered")
    }
}

/// A sealed answer as a caller checks it: `value[key]` is the canonical hash of the rest of
/// `value` (docs/hashing.md).
pub fn assert_sealed_by(value: &Value, key: &str) {
    let mut unsealed = value.clone();
    unsealed
        .as_object_mut()
        .expect("a sealed value is an object")
        .shift_remove(key);
    assert_eq!(
        value[key],
        factomat::support::canonical::canonical_sha256(&unsealed),
        "{key} seals the rest of {value}"
    );
}

/// Decodes a PAYMENT-REQUIRED header (standard padded base64 of JSON).
pub fn decode_header(value: &str) -> Value {
    assert!(
        value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='),
        "header must be standard base64: {value}"
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value)
        .expect("standard base64");
    serde_json::from_slice(&bytes).expect("header is JSON")
}

/// The decoded PAYMENT-REQUIRED header of a 402.
pub fn payment_required(response: &reqwest::Response) -> Value {
    let header = response
        .headers()
        .get("payment-required")
        .expect("a PAYMENT-REQUIRED header");
    decode_header(header.to_str().expect("ascii"))
}

/// The repository root (committed renders live under it).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

static MANIFEST: LazyLock<Value> = LazyLock::new(|| {
    let text = std::fs::read_to_string(repo_root().join("machines.yaml")).expect("machines.yaml");
    serde_norway::from_str(&text).expect("manifest parses")
});

/// The committed manifest as JSON, read independently of the engine.
pub fn manifest() -> Value {
    MANIFEST.clone()
}

/// Every machine's id, path and input example, in the manifest's order (an unpaid POST of the
/// example answers 402).
pub fn machine_routes() -> Vec<(String, String, Value)> {
    manifest()["machines"]
        .as_array()
        .expect("machines")
        .iter()
        .map(|m| {
            (
                m["machine"].as_str().expect("id").to_string(),
                m["path"].as_str().expect("path").to_string(),
                m["input_example"].clone(),
            )
        })
        .collect()
}

/// Seconds since the Unix epoch, by this machine's clock.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One machine's manifest entry.
pub fn machine(id: &str) -> Value {
    manifest()["machines"]
        .as_array()
        .expect("machines")
        .iter()
        .find(|m| m["machine"] == id)
        .cloned()
        .expect("machine present")
}

/// Asserts a 400 with the given code and returns the error object.
pub async fn expect_400(response: reqwest::Response, code: &str, context: &str) -> Value {
    let status = response.status().as_u16();
    assert!(
        response.headers().get("payment-required").is_none(),
        "{context}: a 400 never carries a payment contract"
    );
    let body: Value = response.json().await.expect("error body is JSON");
    assert_eq!(
        status, 400,
        "{context}: expected 400 {code}, got {status} {body}"
    );
    assert_eq!(body["error"]["code"], code, "{context}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{context}: message"
    );
    body["error"].clone()
}

/// Asserts that racing copies of one payment for one request all got its one answer (200,
/// the same bytes) or a 503 while it was being made — never a fresh challenge; returns the
/// statuses.
pub async fn assert_one_answer(responses: Vec<reqwest::Response>) -> Vec<u16> {
    let mut answers = Vec::new();
    for response in responses {
        let status = response.status().as_u16();
        answers.push((status, response.bytes().await.expect("body")));
    }
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "each copy gets the one answer, or 503 while it is being made: {statuses:?}"
    );
    let bodies: std::collections::BTreeSet<&[u8]> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body.as_ref())
        .collect();
    assert_eq!(bodies.len(), 1, "one work run, one answer: {statuses:?}");
    statuses
}

/// The test binary's delivery key file (the secret that seals retained answers), written once.
pub fn delivery_key_file() -> &'static std::path::Path {
    static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
        let path = temp_path("delivery-key");
        std::fs::write(
            &path,
            format!("{}\n", devstack::random_hex32().trim_start_matches("0x")),
        )
        .expect("delivery key file");
        path
    });
    &FILE
}

/// A fresh path in a temporary folder of its own. The folder is always made new: process
/// ids repeat, and a folder an earlier run left under the same name would hand this test
/// that run's files (a ledger with its rows).
pub fn temp_path(name: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("factomat-test-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return dir.join(name),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("temp dir {}: {e}", dir.display()),
        }
    }
}

/// A loopback port that refuses connections for as long as this value lives.
///
/// The socket is bound but never listens, so a connect gets an immediate refusal and the
/// kernel cannot hand the port to another test's server meanwhile (a port merely closed
/// can be, and then a "dead" facilitator or node answers).
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    /// The refusing address.
    pub addr: std::net::SocketAddr,
}

/// Binds a refusing loopback port (see [`ClosedPort`]).
pub fn closed_port() -> ClosedPort {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("loopback"))
        .expect("bind");
    let addr = socket.local_addr().expect("addr");
    ClosedPort {
        _socket: socket,
        addr,
    }
}
