//! Shared rig of the on-chain machine tests (VM03, VM04, VM06): the dev stack with both
//! anvils, the real server paid through the official client, output-schema checks, captured
//! logs, and loopback stand-ins for JSON-RPC and HTTP providers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use warp::Filter;

use super::devstack::{Buyer, DevStack, shared_stack_with_mainnet};
use super::logs::capture;
use super::{TestServer, machine};

/// USDC each rig's buyer starts with: far more than any test spends.
const BUYER_USDC: &str = "100000000";

/// The stack a rig pays on: the test binary's shared one, or a test's own when it changes
/// state other tests read (a contract at a fixed address).
pub enum RigStack {
    Shared(&'static DevStack),
    Own(DevStack),
}

impl Deref for RigStack {
    type Target = DevStack;

    fn deref(&self) -> &DevStack {
        match self {
            RigStack::Shared(stack) => stack,
            RigStack::Own(stack) => stack,
        }
    }
}

pub struct ChainRig {
    pub stack: RigStack,
    pub server: TestServer,
    /// A fresh buyer of this rig's own, so rigs sharing a stack never share a balance.
    pub buyer: Buyer,
}

impl ChainRig {
    /// A server on the binary's shared stack (both anvils) with its RPC URLs pointing at
    /// them; `env` adds or overrides configuration (later pairs win).
    pub async fn start(env: &[(&str, &str)]) -> ChainRig {
        ChainRig::on(RigStack::Shared(shared_stack_with_mainnet()), env).await
    }

    /// [`ChainRig::start`] on a stack of the test's own.
    pub async fn with_own_stack(stack: DevStack, env: &[(&str, &str)]) -> ChainRig {
        ChainRig::on(RigStack::Own(stack), env).await
    }

    async fn on(stack: RigStack, env: &[(&str, &str)]) -> ChainRig {
        capture();
        let pay_to = stack.field("pay_to");
        let facilitator = stack.field("facilitator_url");
        let base = stack.field("rpc_url");
        let mainnet = stack.field("rpc_url_eip155_1");
        let mut all: Vec<(&str, &str)> = vec![
            ("FACTOMAT_PAY_TO", pay_to.as_str()),
            ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
            ("FACTOMAT_RPC_URL_EIP155_8453", base.as_str()),
            ("FACTOMAT_RPC_URL_EIP155_1", mainnet.as_str()),
            ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
        ];
        all.extend_from_slice(env);
        let server = TestServer::with_env(&all).await;
        let buyer = stack.fresh_buyer(BUYER_USDC);
        ChainRig {
            stack,
            server,
            buyer,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    /// One paid call by the rig's buyer through the official client, not yet checked.
    pub fn pay_unchecked(&self, path: &str, body: &Value) -> Value {
        self.stack.pay_as(&self.buyer, &self.url(path), body)
    }

    /// One paid call through the official client; asserts it was delivered and settled.
    pub fn pay(&self, path: &str, body: &Value) -> Value {
        let answer = self.pay_unchecked(path, body);
        assert_eq!(
            answer["status"], 200,
            "paid call to {path}: {} {}",
            answer["body"], answer["error"]
        );
        assert_eq!(
            answer["payment_response"]["success"], true,
            "{}",
            answer["payment_response"]
        );
        answer["body"].clone()
    }

    pub fn buyer_balance(&self) -> String {
        self.stack.usdc_balance(&self.buyer.address)
    }
}

/// Asserts that a result validates against the machine's output schema in machines.yaml.
pub fn assert_output_valid(id: &str, body: &Value) {
    let schema = machine(id)["output_schema"].clone();
    let validator = factomat::catalog::compile_schema(&schema).expect("output schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path().as_str()))
        .collect();
    assert!(
        errors.is_empty(),
        "{id} output fails its schema: {errors:?}\n{body:#}"
    );
}

/// A JSON-RPC endpoint that answers `{}` and counts every request that asks more than the
/// chain check (`eth_chainId` is configuration work, not a call's; a read of an endpoint
/// whose chain is unconfirmed carries one in its batch): a count above zero means paid work
/// read it.
pub async fn rpc_tripwire() -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    let hits = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = hits.clone();
    let addr = serve(warp::body::bytes().map(move |body: bytes::Bytes| {
        let request: Value = serde_json::from_slice(&body).unwrap_or_default();
        let requests = request.as_array().cloned().unwrap_or_else(|| vec![request]);
        if requests.iter().any(|r| r["method"] != "eth_chainId") {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        "{}"
    }))
    .await;
    (addr, hits)
}

/// Serves a warp filter on a fresh loopback port.
pub async fn serve<F>(filter: F) -> SocketAddr
where
    F: Filter + Clone + Send + Sync + 'static,
    F::Extract: warp::Reply,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(warp::serve(filter).incoming(listener).run());
    addr
}

/// The methods an [`rpc_proxy`] saw, in order, without the start-up chain check
/// (`eth_chainId` is configuration work, not a call's).
pub fn calls_after_start_up(seen: &Mutex<Vec<String>>) -> Vec<String> {
    seen.lock()
        .expect("seen")
        .iter()
        .filter(|method| *method != "eth_chainId")
        .cloned()
        .collect()
}

/// What a JSON-RPC stand-in does with one request.
pub enum RpcAction {
    /// Forward to the real node.
    Forward,
    /// Answer with this JSON-RPC `error` object.
    Error(Value),
    /// Answer with this JSON-RPC `result`.
    Result(Value),
    /// Answer HTTP 429 with `Retry-After` of this many seconds.
    Limited(u64),
    /// Answer with this HTTP status and a text body.
    Status(u16),
    /// Never answer.
    Hang,
    /// Forward to the real node, answering only after this long (a slow node).
    Slow(std::time::Duration),
}

/// What a lagging node behind a load balancer answers for a block it has not seen yet.
pub fn header_not_found() -> RpcAction {
    RpcAction::Error(json!({"code": -32000, "message": "header not found"}))
}

/// A stand-in's decision that answers the first `method` request as a lagging node and
/// forwards everything else, with a flag that tells whether it has lagged.
pub fn lagging_once(
    method: &'static str,
) -> (
    impl Fn(&str) -> RpcAction + Send + Sync + 'static,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let lagged = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = lagged.clone();
    let decide = move |asked: &str| {
        if asked == method && !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return header_not_found();
        }
        RpcAction::Forward
    };
    (decide, lagged)
}

/// A JSON-RPC endpoint that forwards to `upstream` unless `decide` says otherwise for a
/// request (given its method). Counts the requests it receives.
pub async fn rpc_proxy<D>(upstream: String, decide: D) -> (SocketAddr, Arc<Mutex<Vec<String>>>)
where
    D: Fn(&str) -> RpcAction + Send + Sync + 'static,
{
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let decide = Arc::new(decide);
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let route = warp::post()
        .and(warp::body::json())
        .then(move |request: Value| {
            let (decide, client, upstream, log) = (
                decide.clone(),
                client.clone(),
                upstream.clone(),
                log.clone(),
            );
            async move {
                let method = request["method"].as_str().unwrap_or("batch").to_string();
                log.lock().expect("log").push(method.clone());
                let reply = |status: u16, body: Vec<u8>| {
                    http::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(body)
                        .expect("response")
                };
                let action = match decide(&method) {
                    RpcAction::Slow(delay) => {
                        tokio::time::sleep(delay).await;
                        RpcAction::Forward
                    }
                    action => action,
                };
                match action {
                    RpcAction::Forward => {
                        let answer = client
                            .post(&upstream)
                            .json(&request)
                            .send()
                            .await
                            .expect("upstream answers");
                        reply(200, answer.bytes().await.expect("body").to_vec())
                    }
                    RpcAction::Error(error) => {
                        let body = json!({"jsonrpc": "2.0", "id": request["id"], "error": error});
                        reply(200, body.to_string().into_bytes())
                    }
                    RpcAction::Result(result) => {
                        let body = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
                        reply(200, body.to_string().into_bytes())
                    }
                    RpcAction::Limited(seconds) => http::Response::builder()
                        .status(429)
                        .header("content-type", "application/json")
                        .header("retry-after", seconds.to_string())
                        .body(b"{\"error\":\"rate limited\"}".to_vec())
                        .expect("response"),
                    RpcAction::Status(code) => reply(code, b"upstream says no".to_vec()),
                    RpcAction::Hang | RpcAction::Slow(_) => {
                        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                        reply(200, Vec::new())
                    }
                }
            }
        });
    (serve(route).await, seen)
}

/// A raw JSON-RPC call straight to a node (to compare our answers with the node's own).
pub async fn rpc_call(url: &str, method: &str, params: Value) -> Value {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let answer: Value = client
        .post(url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("node answers")
        .json()
        .await
        .expect("json");
    answer
}

/// The 4-byte selector of a function signature, as calldata hex.
pub fn selector(signature: &str) -> String {
    let hash = alloy::primitives::keccak256(signature.as_bytes());
    format!("0x{}", alloy::primitives::hex::encode(&hash[..4]))
}
