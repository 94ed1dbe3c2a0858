//! A JSON-RPC proxy in front of anvil that behaves like a hosted provider: it refuses
//! `eth_getLogs` over a block range with the provider's own error, can act like a node that
//! lags behind the head or a slow one, and counts the calls per method.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use warp::Filter;

use super::onchain::serve;

/// Whose refusal an over-range `eth_getLogs` gets (shapes seen from the live services).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLimit {
    /// Alchemy: HTTP 400, `{"code": -32600, "message": "You can make eth_getLogs requests with
    /// up to a N block range. Based on your parameters, this block range should work: [0xF,
    /// 0xT]"}` (the suggested range is the first N blocks of the request; the status as a
    /// public report logged it, boundless-xyz/boundless#838).
    Alchemy,
    /// QuickNode: HTTP 413, `{"code": -32614, "message": "eth_getLogs is limited to a N
    /// range"}` (N with thousands separators, e.g. "10,000").
    QuickNode,
    /// Infura: HTTP 200, `{"code": -32602, "message": "range R exceeds limit of N"}`.
    Infura,
}

/// How the proxy behaves.
#[derive(Clone, Copy, Debug)]
pub struct RpcLimits {
    /// The most blocks (`toBlock - fromBlock + 1`) one `eth_getLogs` may span.
    pub max_log_blocks: u64,
    pub style: LogLimit,
}

/// A running proxy.
pub struct RpcProxy {
    pub addr: SocketAddr,
    /// `http://addr`, for `FACTOMAT_RPC_URL_EIP155_8453`.
    pub url: String,
    state: Arc<State>,
}

struct State {
    upstream: String,
    limits: RpcLimits,
    client: reqwest::Client,
    calls: Mutex<HashMap<String, u64>>,
    refused: AtomicU64,
    /// Blocks this "node" is behind the head; 0 = in sync (see [`RpcProxy::set_lag`]).
    lag: AtomicU64,
    /// Where this "node"'s log index stopped, its state reads in sync (see
    /// [`RpcProxy::freeze_log_index`]).
    log_index: Mutex<Option<FrozenIndex>>,
    /// `eth_getLogs` answers that left logs out for a frozen index.
    logs_left_out: AtomicU64,
    /// How long a request carrying a call of a method waits (see [`RpcProxy::set_delay`]).
    delays: Mutex<HashMap<String, Duration>>,
    /// `eth_call`s still to fail, by the function's selector (see [`RpcProxy::fail_calls_to`]).
    failing_calls: Mutex<HashMap<String, u64>>,
}

impl RpcProxy {
    /// How many calls of `method` the proxy received (batch elements count one each).
    pub fn calls(&self, method: &str) -> u64 {
        self.state
            .calls
            .lock()
            .expect("calls")
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    /// Every method's call count.
    pub fn all_calls(&self) -> HashMap<String, u64> {
        self.state.calls.lock().expect("calls").clone()
    }

    /// How many `eth_getLogs` calls were refused for their range.
    pub fn refused_log_ranges(&self) -> u64 {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// Acts like a node `blocks` behind the head (0 = in sync): a state read (`eth_call`,
    /// `eth_getBalance`, `eth_getCode`, `eth_getStorageAt`, `eth_getTransactionCount`,
    /// `eth_getBlockByNumber`) pinned to a block number above `head - blocks` gets
    /// `{"code": -32000, "message": "header not found"}`, and an `eth_getLogs` reaching past
    /// it gets `[]`, as go-ethereum nodes behind a load balancer answer. `eth_blockNumber`
    /// still reports the true head (another node of the pool answered it).
    pub fn set_lag(&self, blocks: u64) {
        self.state.lag.store(blocks, Ordering::SeqCst);
    }

    /// Acts like a pool whose state reads reach a node in sync while `eth_getLogs` reaches one
    /// whose log index stopped at today's head: its answers leave out the logs of later
    /// blocks. With `catch_up_after`, the index is in sync again once that many answers have
    /// left logs out.
    pub async fn freeze_log_index(&self, catch_up_after: Option<u64>) {
        let at = self.state.head().await;
        *self.state.log_index.lock().expect("log index") = Some(FrozenIndex { at, catch_up_after });
    }

    /// How many `eth_getLogs` answers left logs out for a frozen index.
    pub fn logs_left_out(&self) -> u64 {
        self.state.logs_left_out.load(Ordering::SeqCst)
    }

    /// Acts like a node that fails now and then: the next `times` `eth_call`s of the function
    /// with this selector (0x and 8 hex digits) get HTTP 503 with a JSON-RPC error (in a
    /// batch, the error in its place).
    pub fn fail_calls_to(&self, selector: &str, times: u64) {
        self.state
            .failing_calls
            .lock()
            .expect("failing calls")
            .insert(selector.to_ascii_lowercase(), times);
    }

    /// Acts like a slow provider: every HTTP request that carries a call of `method` (alone or
    /// in a batch) is answered `delay` later, once per request (`Duration::ZERO`: at once).
    /// The calls are counted when they arrive.
    pub fn set_delay(&self, method: &str, delay: Duration) {
        self.state
            .delays
            .lock()
            .expect("delays")
            .insert(method.to_string(), delay);
    }
}

/// A provider-like proxy in front of `upstream` (anvil's URL).
pub async fn rpc_proxy(upstream: &str, limits: RpcLimits) -> RpcProxy {
    let state = Arc::new(State {
        upstream: upstream.to_string(),
        limits,
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
        calls: Mutex::new(HashMap::new()),
        refused: AtomicU64::new(0),
        lag: AtomicU64::new(0),
        log_index: Mutex::new(None),
        logs_left_out: AtomicU64::new(0),
        delays: Mutex::new(HashMap::new()),
        failing_calls: Mutex::new(HashMap::new()),
    });
    let shared = state.clone();
    let route = warp::post()
        .and(warp::body::json())
        .then(move |request: Value| {
            let state = shared.clone();
            async move { state.answer(request).await }
        });
    let addr = serve(route).await;
    RpcProxy {
        addr,
        url: format!("http://{addr}"),
        state,
    }
}

/// A proxy refusing `eth_getLogs` over `max_log_blocks` blocks the way Alchemy does.
pub async fn range_limited_rpc(upstream: &str, max_log_blocks: u64) -> RpcProxy {
    rpc_proxy(
        upstream,
        RpcLimits {
            max_log_blocks,
            style: LogLimit::Alchemy,
        },
    )
    .await
}

/// Where a log index stopped, and after how many answers that left logs out it catches up.
#[derive(Clone, Copy, Debug)]
struct FrozenIndex {
    at: u64,
    catch_up_after: Option<u64>,
}

/// What the proxy makes of one call: forward it, or answer it with (HTTP status, body).
enum Outcome {
    Forward,
    Answer(u16, Value),
}

fn error(id: &Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn parse_quantity(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// "10000" → "10,000".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The position of the block parameter of a state read, by method.
fn block_param(method: &str) -> Option<usize> {
    match method {
        "eth_call" | "eth_getBalance" | "eth_getCode" | "eth_getTransactionCount" => Some(1),
        "eth_getStorageAt" => Some(2),
        "eth_getBlockByNumber" => Some(0),
        _ => None,
    }
}

impl State {
    /// The longest delay set for a method this request calls.
    fn delay_of(&self, request: &Value) -> Duration {
        let calls: Vec<&Value> = match request {
            Value::Array(calls) => calls.iter().collect(),
            call => vec![call],
        };
        let delays = self.delays.lock().expect("delays");
        calls
            .iter()
            .filter_map(|call| call["method"].as_str().and_then(|m| delays.get(m)))
            .copied()
            .max()
            .unwrap_or_default()
    }

    async fn answer(&self, request: Value) -> http::Response<bytes::Bytes> {
        let delay = self.delay_of(&request);
        let (status, body) = match request {
            Value::Array(calls) => {
                let mut answers = Vec::new();
                for call in calls {
                    answers.push(self.one(call).await.1);
                }
                (200, Value::Array(answers))
            }
            call => self.one(call).await,
        };
        tokio::time::sleep(delay).await;
        http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(bytes::Bytes::from(body.to_string()))
            .expect("response")
    }

    async fn one(&self, call: Value) -> (u16, Value) {
        let method = call["method"].as_str().unwrap_or("").to_string();
        *self
            .calls
            .lock()
            .expect("calls")
            .entry(method.clone())
            .or_default() += 1;
        match self.decide(&method, &call).await {
            Outcome::Forward if method == "eth_getLogs" => {
                let mut answer = self.forward(&call).await;
                self.leave_out_unindexed(&mut answer);
                (200, answer)
            }
            Outcome::Forward => (200, self.forward(&call).await),
            Outcome::Answer(status, body) => (status, body),
        }
    }

    async fn forward(&self, call: &Value) -> Value {
        self.client
            .post(&self.upstream)
            .json(call)
            .send()
            .await
            .expect("anvil answers")
            .json()
            .await
            .expect("JSON-RPC answer")
    }

    /// Leaves out of an `eth_getLogs` answer the logs a frozen index has not seen.
    fn leave_out_unindexed(&self, answer: &mut Value) {
        let mut index = self.log_index.lock().expect("log index");
        let (Some(frozen), Some(logs)) = (index.as_mut(), answer["result"].as_array_mut()) else {
            return;
        };
        let found = logs.len();
        logs.retain(|log| {
            log["blockNumber"]
                .as_str()
                .and_then(parse_quantity)
                .is_some_and(|block| block <= frozen.at)
        });
        if logs.len() == found {
            return;
        }
        self.logs_left_out.fetch_add(1, Ordering::SeqCst);
        if let Some(left) = frozen.catch_up_after.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                *index = None;
            }
        }
    }

    async fn head(&self) -> u64 {
        let answer = self
            .forward(&json!({"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber", "params": []}))
            .await;
        parse_quantity(answer["result"].as_str().expect("eth_blockNumber")).expect("quantity")
    }

    /// A block tag of a filter or a read as a number (`latest` and friends: the head).
    async fn block_number(&self, tag: &Value) -> u64 {
        match tag.as_str() {
            None | Some("latest" | "pending" | "safe" | "finalized") => self.head().await,
            Some("earliest") => 0,
            Some(v) => parse_quantity(v).unwrap_or(0),
        }
    }

    /// Whether this `eth_call` is one [`RpcProxy::fail_calls_to`] asked to fail (counted).
    fn fails(&self, call: &Value) -> bool {
        let transaction = &call["params"][0];
        let data = transaction["data"]
            .as_str()
            .or_else(|| transaction["input"].as_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let mut failing = self.failing_calls.lock().expect("failing calls");
        let due = failing
            .iter_mut()
            .find(|(selector, left)| **left > 0 && data.starts_with(selector.as_str()));
        due.map(|(_, left)| *left -= 1).is_some()
    }

    async fn decide(&self, method: &str, call: &Value) -> Outcome {
        let id = &call["id"];
        if method == "eth_call" && self.fails(call) {
            return Outcome::Answer(503, error(id, -32603, "upstream unavailable".into()));
        }
        let lag = self.lag.load(Ordering::SeqCst);
        if method == "eth_getLogs" {
            let filter = &call["params"][0];
            if filter.get("blockHash").is_some() {
                return Outcome::Forward;
            }
            let from = self.block_number(&filter["fromBlock"]).await;
            let to = self.block_number(&filter["toBlock"]).await;
            let span = to.saturating_sub(from) + 1;
            let max = self.limits.max_log_blocks;
            if to >= from && span > max {
                self.refused.fetch_add(1, Ordering::SeqCst);
                return self.refusal(id, from, span);
            }
            if lag > 0 && to > self.head().await.saturating_sub(lag) {
                return Outcome::Answer(200, json!({"jsonrpc": "2.0", "id": id, "result": []}));
            }
            return Outcome::Forward;
        }
        if lag > 0
            && let Some(index) = block_param(method)
            && let Some(pinned) = call["params"][index].as_str().and_then(parse_quantity)
            && pinned > self.head().await.saturating_sub(lag)
        {
            return Outcome::Answer(200, error(id, -32000, "header not found".into()));
        }
        Outcome::Forward
    }

    fn refusal(&self, id: &Value, from: u64, span: u64) -> Outcome {
        let max = self.limits.max_log_blocks;
        match self.limits.style {
            LogLimit::Alchemy => Outcome::Answer(
                400,
                error(
                    id,
                    -32600,
                    format!(
                        "You can make eth_getLogs requests with up to a {max} block range. Based on your parameters, this block range should work: [{from:#x}, {:#x}]",
                        from + max - 1
                    ),
                ),
            ),
            LogLimit::QuickNode => Outcome::Answer(
                413,
                error(
                    id,
                    -32614,
                    format!("eth_getLogs is limited to a {} range", thousands(max)),
                ),
            ),
            LogLimit::Infura => Outcome::Answer(
                200,
                error(id, -32602, format!("range {span} exceeds limit of {max}")),
            ),
        }
    }
}
