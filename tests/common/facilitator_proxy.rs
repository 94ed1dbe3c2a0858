//! The official facilitator behind a loopback proxy that can fail or delay `/settle`.
#![allow(dead_code)]

use std::net::SocketAddr;

use serde_json::json;
use warp::Filter;

use super::onchain::serve;

/// What the facilitator proxy does with `/settle`; `/verify` always reaches the real one.
#[derive(Clone, Copy)]
pub enum Settle {
    /// Answer `success: false` without asking the real facilitator.
    Fail,
    /// Forward after this delay.
    After(std::time::Duration),
    /// Forward (the settlement lands on chain), then answer 500 without a verdict.
    ForwardThenFail,
}

/// The real facilitator behind a loopback proxy that answers `/supported` itself and treats
/// `/settle` as `settle` says.
pub async fn proxied_facilitator(real: String, settle: Settle) -> SocketAddr {
    let client = reqwest::Client::new();
    let forward = warp::path::param::<String>()
        .and(warp::post())
        .and(warp::body::bytes())
        .then(move |step: String, body: bytes::Bytes| {
            let (client, real) = (client.clone(), real.clone());
            async move {
                let reply = |bytes: bytes::Bytes| {
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(bytes)
                        .expect("response")
                };
                match (step.as_str(), settle) {
                    ("settle", Settle::Fail) => {
                        return reply(bytes::Bytes::from(
                            json!({"success": false,
                                "errorReason": "invalid_exact_evm_transaction_failed",
                                "transaction": "", "network": "eip155:8453"})
                            .to_string(),
                        ));
                    }
                    ("settle", Settle::After(delay)) => tokio::time::sleep(delay).await,
                    _ => {}
                }
                let answer = client
                    .post(format!("{real}/{step}"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("real facilitator");
                let forwarded = answer.bytes().await.expect("body");
                if step == "settle" && matches!(settle, Settle::ForwardThenFail) {
                    return http::Response::builder()
                        .status(500)
                        .header("content-type", "application/json")
                        .body(bytes::Bytes::from_static(b"{\"error\":\"internal error\"}"))
                        .expect("response");
                }
                reply(forwarded)
            }
        });
    let supported = warp::path!("supported").map(|| {
        warp::reply::json(
            &json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}),
        )
    });
    serve(supported.or(forward)).await
}
