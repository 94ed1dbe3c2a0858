//! Loopback stubs that answer instantly, so the paid row measures factomat's own cost:
//! a facilitator that accepts every payment (used only by the benchmark — the tests use the
//! official facilitator) and a JSON-RPC endpoint with fixed ERC-20 answers.

use std::net::SocketAddr;
use std::sync::Arc;

use alloy_primitives::{U256, hex};
use alloy_sol_types::{SolType, SolValue, sol_data};
use bytes::Bytes;
use http::{HeaderValue, Response, header::CONTENT_TYPE};
use serde_json::{Value, json};
use warp::Filter;

use crate::BenchError;

const NETWORK: &str = "eip155:8453";
/// The payer every verdict names (anvil account #1); the stub does not parse the payment.
const PAYER: &str = "0x70997970C51812dc3A65C30b0cbB4C0ffC1B8cE8";
const MAX_BODY: u64 = 1 << 20;

fn json_response(body: Bytes) -> Response<Bytes> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn fixed(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

pub async fn facilitator(listen: SocketAddr) -> Result<(), BenchError> {
    let supported = fixed(&json!({
        "kinds": [{"x402Version": 2, "scheme": "exact", "network": NETWORK}],
        "extensions": [],
        "signers": {"eip155:*": [PAYER]},
    }));
    let verify = fixed(&json!({"isValid": true, "payer": PAYER}));
    let settle = fixed(&json!({
        "success": true,
        "transaction": format!("0x{}", "ab".repeat(32)),
        "network": NETWORK,
        "payer": PAYER,
    }));
    let supported = warp::get()
        .and(warp::path("supported"))
        .and(warp::path::end())
        .map(move || json_response(supported.clone()));
    let verify = warp::post()
        .and(warp::path("verify"))
        .and(warp::path::end())
        .and(warp::body::content_length_limit(MAX_BODY))
        .and(warp::body::bytes())
        .map(move |_body: Bytes| json_response(verify.clone()));
    let settle = warp::post()
        .and(warp::path("settle"))
        .and(warp::path::end())
        .and(warp::body::content_length_limit(MAX_BODY))
        .and(warp::body::bytes())
        .map(move |_body: Bytes| json_response(settle.clone()));
    crate::serve_forever(listen, supported.or(verify).or(settle)).await
}

/// Fixed answers of the ERC-20 reads VM02 makes, ABI-encoded by alloy.
struct Answers {
    allowance: String,
    balance: String,
    decimals: String,
    symbol: String,
}

impl Answers {
    fn new() -> Answers {
        let encode = |bytes: Vec<u8>| hex::encode_prefixed(bytes);
        Answers {
            allowance: encode((U256::from(250_000_000u64),).abi_encode_params()),
            balance: encode((U256::from(100_000_000u64),).abi_encode_params()),
            decimals: encode(<(sol_data::Uint<8>,)>::abi_encode_params(&(6u8,))),
            symbol: encode(("USDC".to_string(),).abi_encode_params()),
        }
    }

    fn call(&self, params: &Value) -> Value {
        let data = params
            .pointer("/0/data")
            .or_else(|| params.pointer("/0/input"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let selector = data.get(..10).unwrap_or_default();
        match selector {
            "0xdd62ed3e" => json!(self.allowance),
            "0x70a08231" => json!(self.balance),
            "0x313ce567" => json!(self.decimals),
            "0x95d89b41" => json!(self.symbol),
            _ => json!("0x"),
        }
    }

    fn answer(&self, request: &Value) -> Value {
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let result = match request.get("method").and_then(Value::as_str) {
            Some("eth_blockNumber") => json!("0x1612d4e"),
            Some("eth_chainId") => json!("0x2105"),
            Some("eth_getCode") => json!("0x6080604052"),
            Some("eth_call") => self.call(&params),
            _ => {
                return json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": "method not found"}});
            }
        };
        json!({"jsonrpc": "2.0", "id": id, "result": result})
    }
}

pub async fn rpc(listen: SocketAddr) -> Result<(), BenchError> {
    let answers = Arc::new(Answers::new());
    let routes = warp::post()
        .and(warp::body::content_length_limit(MAX_BODY))
        .and(warp::body::bytes())
        .map(move |body: Bytes| {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let reply = match &request {
                Value::Array(batch) => {
                    Value::Array(batch.iter().map(|r| answers.answer(r)).collect())
                }
                single => answers.answer(single),
            };
            json_response(fixed(&reply))
        });
    crate::serve_forever(listen, routes).await
}
