//! What an operator and a buyer rely on around the paid paths: request ids on every answer,
//! a 503 instead of a 402 for a machine this deployment cannot serve, and /health naming
//! which machines are for sale.

mod common;

use common::{ALL_PROVIDERS, PAY_TO, TestServer};
use serde_json::{Value, json};

const VM01: &str = "/v1/url-context";
const VM02: &str = "/v1/allowance-exposure";
const VM03: &str = "/v1/portfolio-preflight";

fn example(id: &str) -> Value {
    common::machine(id)["input_example"].clone()
}

fn request_id(response: &reqwest::Response) -> String {
    let ids = response.headers().get_all("x-request-id").iter().count();
    assert_eq!(ids, 1, "{} carries one x-request-id", response.status());
    response
        .headers()
        .get("x-request-id")
        .unwrap_or_else(|| panic!("{} has no x-request-id", response.status()))
        .to_str()
        .expect("ascii")
        .to_string()
}

/// Every provider but the eip155:8453 RPC and the inventory providers.
fn without_base_rpc_and_inventory() -> Vec<(&'static str, &'static str)> {
    ALL_PROVIDERS
        .iter()
        .copied()
        .filter(|(key, _)| {
            *key != "FACTOMAT_RPC_URL_EIP155_8453" && !key.starts_with("FACTOMAT_INVENTORY_URL")
        })
        .collect()
}

#[tokio::test]
async fn every_answer_carries_a_request_id_and_a_callers_well_formed_id_is_kept() {
    let mut env = vec![("FACTOMAT_PAY_TO", PAY_TO)];
    env.extend(without_base_rpc_and_inventory());
    let server = TestServer::with_env(&env).await;
    let ok = server.get("/health").await;
    let bad = server.post_json(VM01, &json!({"url": 7})).await;
    let challenge = server.post_json(VM01, &example("VM01")).await;
    let unavailable = server.post_json(VM02, &example("VM02")).await;
    let missing = server.get("/nowhere").await;
    let mut seen = Vec::new();
    for (response, status) in [
        (ok, 200),
        (bad, 400),
        (challenge, 402),
        (unavailable, 503),
        (missing, 404),
    ] {
        assert_eq!(response.status().as_u16(), status);
        let id = request_id(&response);
        assert_eq!(id.len(), 32, "a fresh id is 128 random bits in hex: {id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 5, "every request gets its own id");

    let echoed = server
        .client
        .post(format!("{}{VM01}", server.url))
        .header("content-type", "application/json")
        .header("x-request-id", "buyer-7f3a:01.retry_2")
        .json(&example("VM01"))
        .send()
        .await
        .expect("answered");
    assert_eq!(echoed.status().as_u16(), 402);
    assert_eq!(request_id(&echoed), "buyer-7f3a:01.retry_2");
    let replaced = server
        .client
        .get(format!("{}/health", server.url))
        .header("x-request-id", "not ok; has spaces")
        .send()
        .await
        .expect("answered");
    let replaced = request_id(&replaced);
    assert_ne!(replaced, "not ok; has spaces");
    assert_eq!(replaced.len(), 32);
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn a_machine_whose_providers_are_missing_answers_503_before_any_payment_is_asked() {
    let mut env = vec![("FACTOMAT_PAY_TO", PAY_TO)];
    env.extend(without_base_rpc_and_inventory());
    let server = TestServer::with_env(&env).await;
    for (path, id) in [(VM02, "VM02"), (VM03, "VM03")] {
        let response = server.post_json(path, &example(id)).await;
        assert_eq!(response.status().as_u16(), 503, "{id}");
        assert!(
            response.headers().get("payment-required").is_none(),
            "{id}: no payment is asked for a machine that cannot serve"
        );
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["error"]["code"], "provider_not_configured", "{id}");
    }
    // Bad input still gets its 400 first.
    let bad = server
        .post_json(
            VM02,
            &json!({"owner": "0x12", "token": "x", "spender": "y"}),
        )
        .await;
    assert_eq!(bad.status().as_u16(), 400);
    // The machines whose providers are configured still ask for payment.
    for id in ["VM01", "VM05", "VM07", "VM08", "VM11"] {
        let path = common::machine(id)["path"]
            .as_str()
            .expect("path")
            .to_string();
        let response = server.post_json(&path, &example(id)).await;
        assert_eq!(response.status().as_u16(), 402, "{id}");
    }

    let health: Value = server.get_json("/health").await;
    let readiness = health["machine_readiness"].as_array().expect("list");
    assert_eq!(readiness.len(), 11);
    let not_ready: Vec<&str> = readiness
        .iter()
        .filter(|m| m["ready"] == false)
        .map(|m| m["machine"].as_str().expect("id"))
        .collect();
    // VM04, VM06, VM09 and VM10 read eip155:8453 too.
    assert_eq!(
        not_ready,
        ["VM02", "VM03", "VM04", "VM06", "VM09", "VM10"],
        "{health}"
    );
    let vm02 = readiness
        .iter()
        .find(|m| m["machine"] == "VM02")
        .expect("VM02");
    assert_eq!(vm02["path"], VM02);
    assert_eq!(vm02["code"], "provider_not_configured");
    assert!(
        vm02["message"]
            .as_str()
            .is_some_and(|m| m.contains("eip155:8453") && !m.contains("127.0.0.1")),
        "names what is missing, never a configured URL: {vm02}"
    );
    assert_eq!(
        server.outbound(),
        0,
        "readiness is configuration, not provider work"
    );
}
