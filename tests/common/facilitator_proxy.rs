//! The official facilitator behind a loopback proxy that records what it was asked and can
//! fail, delay, burn the nonce of, or leave pending the `/settle` it forwards.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use warp::Filter;

use super::closing_relay::losing_first_answer_to;
use super::devstack::{DevStack, run_node};
use super::onchain::serve;

/// What the facilitator proxy does with `/settle`; `/verify` always reaches the real one.
#[derive(Clone, Debug)]
pub enum Settle {
    /// Forward as is (the proxy only records).
    Forward,
    /// Answer `success: false` without asking the real facilitator, with a refusal of its
    /// settle-time re-verification (`invalid_exact_evm_transaction_simulation_failed`) and
    /// an empty `transaction`: nothing was broadcast.
    Fail,
    /// Answer `success: false` with this `errorReason` and an empty `transaction`, without
    /// asking the real facilitator.
    Refuse(&'static str),
    /// Answer the first `/settle` as [`Settle::Refuse`] does; forward every later one.
    RefuseFirst(&'static str),
    /// Answer `success: false`, `errorReason: "invalid_exact_evm_insufficient_balance"` and an
    /// empty `transaction` without asking the real facilitator: its settle-time
    /// re-verification found the payer's funds gone. With `sweep_key` (the payer's key) the
    /// payer's whole balance is moved away on anvil (`chain.mjs sweep`), so the chain agrees:
    /// before the answer, or with `sweep_late` just after it (our node a block behind the
    /// facilitator's). Without it our node still shows the funds (a facilitator whose node is
    /// ahead of ours, or a wrong one). With `to_us`, that many atomic units go to the
    /// payment's payTo first (a payment to us during the call, as when another call of the
    /// payer's settled first); what is left goes to a fresh address.
    RefuseForFunds {
        sweep_key: Option<String>,
        sweep_late: bool,
        to_us: Option<u128>,
    },
    /// Forward after this delay.
    After(Duration),
    /// Forward (the settlement lands on chain), then answer 500 without a verdict.
    ForwardThenFail,
    /// First get a second authorization with the same nonce (buyer → buyer, value 0, signed
    /// with `buyer_key`) mined on anvil (`chain.mjs burn-nonce`), then forward.
    BurnNonceThenForward { buyer_key: String },
    /// Forward the first settle of a payload in the background, wait until its transaction is
    /// in anvil's pool (or mined), and answer at once `success: false`, `errorReason:
    /// "settlement_pending"` with that real hash. A retry of the same payload (same nonce) gets
    /// the same answer from the proxy: nothing is broadcast twice.
    PendingWithRealHash,
    /// As [`Settle::PendingWithRealHash`], but the answer is the reference facilitator's when
    /// its `writeContract` throws after the node took the transaction: `success: false`,
    /// `errorReason: "invalid_exact_evm_transaction_failed"` and an empty `transaction`.
    BroadcastThenFailNamingNoTx,
    /// As [`Settle::PendingWithRealHash`], behind a relay that loses the first `/settle`
    /// answer (the connection reset as it came back), so the server sends it again; every
    /// answer is the settle-time re-verification's refusal naming no transaction
    /// (`invalid_exact_evm_transaction_simulation_failed`), what a facilitator instance says
    /// of a copy while the first's transfer waits in the pool.
    BroadcastThenLoseTheAnswer,
    /// Answer `success: false` naming a transaction hash that never gets mined, after (when
    /// `advance_past_valid_before`) moving anvil's clock past the authorization's
    /// `validBefore` and mining a block. The real facilitator is not asked.
    FailNamingUnminedTx { advance_past_valid_before: bool },
    /// Answer `success: true` naming a transaction hash that exists nowhere, without asking the
    /// real facilitator (a lying or broken facilitator: nothing moves on chain).
    SucceedNamingUnminedTx,
    /// Never answer (the caller's timeout fires).
    Hang,
    /// Forward, then leave this field out of the answer (x402 makes `payer` optional).
    ForwardWithout(&'static str),
    /// Forward, then set this field of the answer to this string (a facilitator naming
    /// another network than the one it settled on).
    ForwardNaming(&'static str, &'static str),
    /// Answer `success: true` naming no transaction, without asking the real facilitator:
    /// nothing is on chain, yet the facilitator claims the money moved.
    SucceedNamingNoTx,
}

/// One request the proxy received.
#[derive(Clone, Debug)]
pub struct Received {
    /// `verify` or `settle`.
    pub step: String,
    /// The request body as JSON (a JSON string when it did not parse).
    pub body: Value,
}

/// What the proxy saw and did, shared with the test.
#[derive(Clone, Default)]
pub struct Recorder {
    received: Arc<Mutex<Vec<Received>>>,
    forwarded_settles: Arc<Mutex<u64>>,
    held_verifies: Arc<Mutex<Option<HeldVerifies>>>,
}

/// `/verify` requests kept waiting until `left` more have arrived (see
/// [`Recorder::hold_verifies`]).
struct HeldVerifies {
    barrier: Arc<tokio::sync::Barrier>,
    left: usize,
}

impl Recorder {
    fn push(&self, step: &str, body: &[u8]) {
        let body = serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
        self.received.lock().expect("recorder").push(Received {
            step: step.to_string(),
            body,
        });
    }

    /// Every request received, in order.
    pub fn all(&self) -> Vec<Received> {
        self.received.lock().expect("recorder").clone()
    }

    /// The bodies of the requests to one step (`verify` or `settle`), in order.
    pub fn bodies(&self, step: &str) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|r| r.step == step)
            .map(|r| r.body)
            .collect()
    }

    /// How many `/verify` requests the proxy received.
    pub fn verifies(&self) -> usize {
        self.bodies("verify").len()
    }

    /// How many `/settle` requests the proxy received.
    pub fn settles(&self) -> usize {
        self.bodies("settle").len()
    }

    /// How many `/settle` requests reached the real facilitator.
    pub fn forwarded_settles(&self) -> u64 {
        *self.forwarded_settles.lock().expect("recorder")
    }

    /// The next `count` `/verify` requests wait for each other and are forwarded together:
    /// payments sent at once then pass every check before the ledger at the same time.
    pub fn hold_verifies(&self, count: usize) {
        *self.held_verifies.lock().expect("recorder") = Some(HeldVerifies {
            barrier: Arc::new(tokio::sync::Barrier::new(count)),
            left: count,
        });
    }

    /// The barrier a `/verify` waits at, while a hold lasts.
    fn verify_hold(&self) -> Option<Arc<tokio::sync::Barrier>> {
        let mut held = self.held_verifies.lock().expect("recorder");
        let hold = held.as_mut()?;
        let barrier = hold.barrier.clone();
        hold.left -= 1;
        if hold.left == 0 {
            *held = None;
        }
        Some(barrier)
    }
}

/// A running proxy: its address and what it recorded.
pub struct FacilitatorProxy {
    pub addr: SocketAddr,
    /// `http://addr`, for `FACTOMAT_FACILITATOR_URL`.
    pub url: String,
    pub recorder: Recorder,
}

struct Proxy {
    real: String,
    rpc_url: Option<String>,
    settle: Settle,
    recorder: Recorder,
    client: reqwest::Client,
    /// Pending answers by authorization nonce (PendingWithRealHash).
    pending: tokio::sync::Mutex<HashMap<String, Value>>,
}

/// The real facilitator behind a loopback proxy that answers `/supported` itself and treats
/// `/settle` as `settle` says. Modes that touch the chain need [`facilitator_proxy`].
pub async fn proxied_facilitator(real: String, settle: Settle) -> SocketAddr {
    start(real, None, settle).await.addr
}

/// The stack's facilitator behind a recording proxy; modes that touch the chain use the
/// stack's anvil.
pub async fn facilitator_proxy(stack: &DevStack, settle: Settle) -> FacilitatorProxy {
    let loses_an_answer = matches!(settle, Settle::BroadcastThenLoseTheAnswer);
    let mut proxy = start(
        stack.field("facilitator_url"),
        Some(stack.field("rpc_url")),
        settle,
    )
    .await;
    if loses_an_answer {
        proxy.url = losing_first_answer_to(&proxy.url, b"POST /settle")
            .await
            .url;
    }
    proxy
}

async fn start(real: String, rpc_url: Option<String>, settle: Settle) -> FacilitatorProxy {
    let recorder = Recorder::default();
    let proxy = Arc::new(Proxy {
        real,
        rpc_url,
        settle,
        recorder: recorder.clone(),
        // A new connection per request: the real facilitator closes idle ones at 5 s, and a
        // request written on one in that instant would fail the proxy, not the server.
        client: reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client"),
        pending: tokio::sync::Mutex::new(HashMap::new()),
    });
    let forward = warp::path::param::<String>()
        .and(warp::post())
        .and(warp::body::bytes())
        .then(move |step: String, body: bytes::Bytes| {
            let proxy = proxy.clone();
            // In a task of its own: a caller that gives up (our settle timeout) must not cut
            // a settlement the proxy still forwards later.
            async move {
                tokio::spawn(async move { proxy.handle(&step, body).await })
                    .await
                    .expect("proxy task")
            }
        });
    let supported = warp::path!("supported").map(|| {
        warp::reply::json(
            &json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}),
        )
    });
    let addr = serve(supported.or(forward)).await;
    FacilitatorProxy {
        addr,
        url: format!("http://{addr}"),
        recorder,
    }
}

/// What the proxy says of a settlement it forwarded in the background.
enum Broadcast {
    /// `settlement_pending` with the real hash.
    Pending,
    /// The reference facilitator's failure when `writeContract` throws, naming no transaction.
    FailedNamingNoTx,
    /// The settle-time re-verification's refusal, naming no transaction.
    Refused,
}

/// A JSON answer with this status.
fn reply(status: u16, body: Vec<u8>) -> http::Response<bytes::Bytes> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(body))
        .expect("response")
}

/// Moves `to_us` (amount, payTo) first, then the rest of `key`'s balance to a fresh address,
/// each mined.
async fn sweep(rpc: String, key: String, to_us: Option<(u128, String)>) {
    let swept = tokio::task::spawn_blocking(move || {
        let sweep = |extra: &[&str]| {
            let args = [&["--rpc-url", &rpc, "sweep", "--from-key", &key], extra].concat();
            let swept = run_node("chain.mjs", &args);
            assert!(swept["transaction"].is_string(), "sweep failed: {swept}");
        };
        if let Some((amount, pay_to)) = to_us {
            sweep(&["--amount", &amount.to_string(), &pay_to]);
        }
        sweep(&[&super::devstack::fresh_payee()]);
    })
    .await;
    swept.expect("sweep runs");
}

/// A settle-time re-verification's refusal: nothing broadcast.
fn refusal(reason: &str) -> http::Response<bytes::Bytes> {
    let answer = json!({"success": false, "errorReason": reason,
        "transaction": "", "network": "eip155:8453"});
    reply(200, answer.to_string().into_bytes())
}

/// `paymentPayload.payload.authorization` of a facilitator request body.
fn authorization(body: &[u8]) -> Value {
    let body: Value = serde_json::from_slice(body).expect("facilitator body is JSON");
    body["paymentPayload"]["payload"]["authorization"].clone()
}

impl Proxy {
    async fn handle(&self, step: &str, body: bytes::Bytes) -> http::Response<bytes::Bytes> {
        self.recorder.push(step, &body);
        if step != "settle" {
            let held = (step == "verify").then(|| self.recorder.verify_hold());
            if let Some(barrier) = held.flatten() {
                barrier.wait().await;
            }
            let (status, answer) = self.forward(step, body).await;
            return reply(status, answer);
        }
        match self.settle.clone() {
            Settle::Forward => {}
            Settle::Fail => {
                return refusal("invalid_exact_evm_transaction_simulation_failed");
            }
            Settle::Refuse(reason) => return refusal(reason),
            Settle::RefuseFirst(reason) if self.recorder.settles() == 1 => {
                return refusal(reason);
            }
            Settle::RefuseFirst(_) => {}
            Settle::RefuseForFunds {
                sweep_key,
                sweep_late,
                to_us,
            } => {
                let pay_to = authorization(&body)["to"].as_str().map(str::to_string);
                let to_us = to_us.zip(pay_to);
                match sweep_key {
                    Some(key) if sweep_late => {
                        tokio::spawn(sweep(self.rpc_url(), key, to_us));
                    }
                    Some(key) => sweep(self.rpc_url(), key, to_us).await,
                    None => {}
                }
                return refusal("invalid_exact_evm_insufficient_balance");
            }
            Settle::After(delay) => tokio::time::sleep(delay).await,
            Settle::ForwardThenFail => {
                self.forward(step, body).await;
                return reply(500, b"{\"error\":\"internal error\"}".to_vec());
            }
            Settle::BurnNonceThenForward { buyer_key } => self.burn_nonce(&body, &buyer_key).await,
            Settle::PendingWithRealHash => {
                return reply(200, self.pending(body, Broadcast::Pending).await);
            }
            Settle::BroadcastThenFailNamingNoTx => {
                return reply(200, self.pending(body, Broadcast::FailedNamingNoTx).await);
            }
            Settle::BroadcastThenLoseTheAnswer => {
                return reply(200, self.pending(body, Broadcast::Refused).await);
            }
            Settle::FailNamingUnminedTx {
                advance_past_valid_before,
            } => {
                return reply(
                    200,
                    self.fail_unmined(&body, advance_past_valid_before).await,
                );
            }
            Settle::SucceedNamingUnminedTx => {
                let payer = authorization(&body)["from"].clone();
                let lie = json!({"success": true, "transaction": super::devstack::random_hex32(),
                    "network": "eip155:8453", "payer": payer});
                return reply(200, lie.to_string().into_bytes());
            }
            Settle::Hang => std::future::pending::<()>().await,
            Settle::SucceedNamingNoTx => {
                let payer = authorization(&body)["from"].clone();
                let claim = json!({"success": true, "network": "eip155:8453", "payer": payer});
                return reply(200, claim.to_string().into_bytes());
            }
            Settle::ForwardWithout(field) => {
                let (status, answer) = self.forward(step, body).await;
                let mut answer: Value = serde_json::from_slice(&answer).expect("settle answer");
                answer.as_object_mut().expect("object").remove(field);
                return reply(status, answer.to_string().into_bytes());
            }
            Settle::ForwardNaming(field, value) => {
                let (status, answer) = self.forward(step, body).await;
                let mut answer: Value = serde_json::from_slice(&answer).expect("settle answer");
                answer[field] = Value::String(value.to_string());
                return reply(status, answer.to_string().into_bytes());
            }
        }
        let (status, answer) = self.forward(step, body).await;
        reply(status, answer)
    }

    /// Sends the request to the real facilitator; returns its status and body.
    async fn forward(&self, step: &str, body: bytes::Bytes) -> (u16, Vec<u8>) {
        if step == "settle" {
            *self.recorder.forwarded_settles.lock().expect("recorder") += 1;
        }
        forward_to(&self.client, &self.real, step, body).await
    }

    fn rpc_url(&self) -> String {
        self.rpc_url
            .clone()
            .expect("this mode needs the chain: start the proxy with facilitator_proxy(&stack, …)")
    }

    /// Gets a value-0 self-authorization with the payment's nonce mined (chain.mjs burn-nonce).
    async fn burn_nonce(&self, body: &[u8], buyer_key: &str) {
        let nonce = authorization(body)["nonce"]
            .as_str()
            .expect("authorization.nonce")
            .to_string();
        let (rpc, key) = (self.rpc_url(), buyer_key.to_string());
        let burned = tokio::task::spawn_blocking(move || {
            run_node(
                "chain.mjs",
                &["--rpc-url", &rpc, "burn-nonce", "--from-key", &key, &nonce],
            )
        })
        .await
        .expect("burn-nonce runs");
        assert!(
            burned["transaction"].is_string(),
            "burn-nonce failed: {burned}"
        );
    }

    /// The answer `said` of a settlement forwarded in the background, once its transfer is in
    /// the pool (see [`Settle::PendingWithRealHash`] and the two after it).
    async fn pending(&self, body: bytes::Bytes, said: Broadcast) -> Vec<u8> {
        let auth = authorization(&body);
        let nonce = auth["nonce"].as_str().expect("nonce").to_lowercase();
        let mut pending = self.pending.lock().await;
        if let Some(answer) = pending.get(&nonce) {
            return answer.to_string().into_bytes();
        }
        *self.recorder.forwarded_settles.lock().expect("recorder") += 1;
        let (client, real) = (self.client.clone(), self.real.clone());
        let settled = tokio::spawn(async move { forward_to(&client, &real, "settle", body).await });
        let hash = wait_for_settlement(&self.rpc_url(), &nonce, settled).await;
        let answer = match said {
            Broadcast::Pending => json!({"success": false, "errorReason": "settlement_pending",
                "transaction": hash, "network": "eip155:8453", "payer": auth["from"]}),
            Broadcast::FailedNamingNoTx => {
                json!({"success": false, "errorReason": "invalid_exact_evm_transaction_failed",
                "errorMessage": "The request took too long to respond.",
                "transaction": "", "network": "eip155:8453", "payer": auth["from"]})
            }
            Broadcast::Refused => json!({"success": false,
                "errorReason": "invalid_exact_evm_transaction_simulation_failed",
                "transaction": "", "network": "eip155:8453", "payer": auth["from"]}),
        };
        pending.insert(nonce, answer.clone());
        answer.to_string().into_bytes()
    }

    /// A failure naming a hash that is never mined, optionally after expiring the window.
    async fn fail_unmined(&self, body: &[u8], advance: bool) -> Vec<u8> {
        let auth = authorization(body);
        if advance {
            let valid_before: u64 = auth["validBefore"]
                .as_str()
                .expect("validBefore")
                .parse()
                .expect("validBefore is a number");
            advance_past(&self.rpc_url(), valid_before).await;
        }
        let hash = super::devstack::random_hex32();
        json!({"success": false, "errorReason": "invalid_exact_evm_transaction_failed",
            "errorMessage": "transaction was not confirmed", "transaction": hash,
            "network": "eip155:8453", "payer": auth["from"]})
        .to_string()
        .into_bytes()
    }
}

async fn forward_to(
    client: &reqwest::Client,
    real: &str,
    step: &str,
    body: bytes::Bytes,
) -> (u16, Vec<u8>) {
    let answer = client
        .post(format!("{real}/{step}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("real facilitator");
    let status = answer.status().as_u16();
    (status, answer.bytes().await.expect("body").to_vec())
}

/// One JSON-RPC call to anvil; returns `result` (panics on an error answer).
pub async fn anvil_rpc(rpc_url: &str, method: &str, params: Value) -> Value {
    let answer: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(rpc_url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("anvil answers")
        .json()
        .await
        .expect("JSON-RPC answer");
    assert!(answer["error"].is_null(), "{method}: {answer}");
    answer["result"].clone()
}

/// The hash of the settlement transaction carrying `nonce`: found in anvil's pool (block time)
/// or, once mined, in the real facilitator's answer. Polls every 25 ms for at most 30 s.
async fn wait_for_settlement(
    rpc_url: &str,
    nonce: &str,
    mut settled: tokio::task::JoinHandle<(u16, Vec<u8>)>,
) -> String {
    let needle = nonce.trim_start_matches("0x").to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        if let Some(hash) = pooled_transaction(rpc_url, &needle).await {
            return hash;
        }
        if settled.is_finished() {
            let (_, body) = (&mut settled).await.expect("forwarded settle");
            let answer: Value = serde_json::from_slice(&body).expect("settle answer");
            return answer["transaction"]
                .as_str()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| panic!("the real settle named no transaction: {answer}"))
                .to_string();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no settlement transaction for nonce {nonce} within 30 s");
}

/// A transaction in anvil's pool whose input contains `needle` (hex, no 0x).
async fn pooled_transaction(rpc_url: &str, needle: &str) -> Option<String> {
    let pool = anvil_rpc(rpc_url, "txpool_content", json!([])).await;
    let senders = pool["pending"].as_object()?;
    senders
        .values()
        .filter_map(Value::as_object)
        .flat_map(|txs| txs.values())
        .find(|tx| {
            tx["input"]
                .as_str()
                .is_some_and(|i| i.to_lowercase().contains(needle))
        })
        .and_then(|tx| tx["hash"].as_str().map(str::to_string))
}

/// Moves anvil's clock so that the next block's timestamp is at least `timestamp`, and mines it.
pub async fn advance_past(rpc_url: &str, timestamp: u64) {
    let latest = anvil_rpc(rpc_url, "eth_getBlockByNumber", json!(["latest", false])).await;
    let now = u64::from_str_radix(
        latest["timestamp"]
            .as_str()
            .expect("timestamp")
            .trim_start_matches("0x"),
        16,
    )
    .expect("hex timestamp");
    if now < timestamp {
        anvil_rpc(rpc_url, "evm_increaseTime", json!([timestamp - now])).await;
    }
    anvil_rpc(rpc_url, "evm_mine", json!([])).await;
}
