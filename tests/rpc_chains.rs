//! Several RPC endpoints per chain, checked for their chain, failing over one at a time:
//! loopback JSON-RPC stand-ins in front of the dev stack's anvils that misbehave the way
//! hosted providers do (another chain's id, 429 with Retry-After, a lagging node behind a
//! load balancer answering "header not found"). One dev stack serves every case.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::logs::logs;
use common::onchain::{
    ChainRig, RpcAction, assert_output_valid, header_not_found, lagging_once, rpc_proxy,
};
use serde_json::{Value, json};

const VM02: &str = "/v1/allowance-exposure";
const VM06: &str = "/v1/transaction-gas-preflight";
const SPENDER: &str = "0x00000000000000000000000000000000000000a2";
const OWNER: &str = "0x5a0b000000000000000000000000000000002001";
const RETRY_AFTER: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_checked_for_their_chain_and_fail_over_one_at_a_time() {
    let stack = common::devstack::shared_stack_with_mainnet();
    let base = stack.field("rpc_url");
    // eip155:1 is configured with an endpoint that serves Base.
    let (wrong_chain, _) = rpc_proxy(base.clone(), |method| match method {
        "eth_chainId" => RpcAction::Result(json!("0x2105")),
        _ => RpcAction::Forward,
    })
    .await;
    // Base #1 answers its chain id, then 429 with Retry-After (long enough to outlast the
    // next paid call on the dev stack), then is dead.
    let first_calls = Arc::new(AtomicUsize::new(0));
    let counter = first_calls.clone();
    let (first, first_seen) = rpc_proxy(base.clone(), move |method| {
        if method == "eth_chainId" {
            return RpcAction::Forward;
        }
        match counter.fetch_add(1, Ordering::SeqCst) {
            0 => RpcAction::Limited(RETRY_AFTER.as_secs()),
            _ => RpcAction::Status(503),
        }
    })
    .await;
    // Base #2 forwards, but the first batch read at a new block lands on a lagging node.
    let (decide, _) = lagging_once("batch");
    let (second, second_seen) = rpc_proxy(base.clone(), decide).await;
    let (wrong, one, two) = (
        format!("http://{wrong_chain}/v2/SECRET-wrong"),
        format!("http://{first}/v2/SECRET-first"),
        format!("http://{second}/v2/SECRET-second"),
    );
    let rig = ChainRig::start(&[
        ("FACTOMAT_RPC_URL_EIP155_1", wrong.as_str()),
        ("FACTOMAT_RPC_URL_EIP155_8453", one.as_str()),
        ("FACTOMAT_RPC_URLS_EIP155_8453", two.as_str()),
        ("FACTOMAT_ADMIN_LISTEN", "127.0.0.1:0"),
    ])
    .await;

    // The wrong chain: VM06 and VM04 are not ready, /health and the log say why.
    let health: Value = rig.server.get_json("/health").await;
    let readiness = health["machine_readiness"].as_array().expect("readiness");
    for id in ["VM04", "VM06"] {
        let entry = readiness
            .iter()
            .find(|m| m["machine"] == id)
            .expect("machine");
        assert_eq!(entry["ready"], false, "{entry}");
        assert_eq!(entry["code"], "provider_wrong_chain");
        let message = entry["message"].as_str().expect("message");
        assert!(
            message
                .contains("rpc_url_eip155_1 answers eth_chainId 8453 (eip155:8453), not eip155:1"),
            "{message}"
        );
    }
    let refused = rig
        .server
        .post_json(VM06, &json!({"chain": "eip155:1", "to": SPENDER}))
        .await;
    assert_eq!(refused.status().as_u16(), 503, "no payment is asked for");
    let log = logs();
    assert!(
        log.contains("rpc_url_eip155_1"),
        "the log names the setting"
    );
    assert!(!log.contains("SECRET-"), "no URL in the log");

    // Base: #1 answers 429 with Retry-After, the read moves to #2, whose lagging node is
    // asked again; both reads are at one block.
    let token = rig.stack.deploy_erc20("Test Token", "TST", "18");
    rig.stack
        .chain(&["mint", OWNER, "100000000000000000000", "--token", &token]);
    let request = json!({"owner": OWNER, "token": token, "spender": SPENDER});
    let body = rig.pay(VM02, &request);
    assert_output_valid("VM02", &body);
    assert_eq!(body["status"], "OK", "{body}");
    assert_eq!(body["balance_raw"], "100000000000000000000");
    assert_eq!(body["allowance_raw"], "0");
    let limitations = body["limitations"].to_string();
    assert!(
        limitations
            .contains("eip155:8453#1 failed (HTTP 429); the read was retried on eip155:8453#2"),
        "{limitations}"
    );
    assert!(limitations.contains("eip155:8453#2 did not know the requested block yet"));
    assert!(!body.to_string().contains("SECRET-"));
    let first_reads = first_seen.lock().expect("seen").len();
    // The 429 came before this instant, so the cool-down ends before RETRY_AFTER from now.
    let cooled = tokio::time::Instant::now() + RETRY_AFTER + Duration::from_millis(100);

    // Within the cool-down #1 is not asked at all.
    let body = rig.pay(VM02, &request);
    assert_eq!(body["status"], "OK", "{body}");
    assert_eq!(first_seen.lock().expect("seen").len(), first_reads);
    assert!(!body["limitations"].to_string().contains("retried"));

    // After it, #1 is tried again (now dead: 503) and #2 answers.
    tokio::time::sleep_until(cooled).await;
    let body = rig.pay(VM02, &request);
    assert_eq!(body["status"], "OK", "{body}");
    assert_eq!(first_seen.lock().expect("seen").len(), first_reads + 1);
    assert!(second_seen.lock().expect("seen").len() > 3);

    // Metrics name both endpoints by position, never by URL.
    let text = rig.server.admin_metrics().await;
    for series in [
        "rpc_endpoint=\"eip155:8453#1\",result=\"rate_limited\"",
        "rpc_endpoint=\"eip155:8453#1\",result=\"error\"",
        "rpc_endpoint=\"eip155:8453#2\",result=\"lagging\"",
        "rpc_endpoint=\"eip155:8453#2\",result=\"ok\"",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    assert!(!text.contains("SECRET-"));
}

/// A node still behind when a read is asked again is passed over for a moment: that read
/// ends within its two attempts (HOLD, and it says why), and the next observation's reads go
/// to the next endpoint, which knows the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_still_behind_on_the_retry_hands_the_next_reads_to_the_next_endpoint() {
    let stack = common::devstack::shared_stack_with_mainnet();
    let base = stack.field("rpc_url");
    // #1 is also down for VM06's two reads, so they fail over to #2 whether or not #1 is
    // still passed over by then.
    let (behind, behind_seen) = rpc_proxy(base.clone(), |method| match method {
        "batch" => header_not_found(),
        "eth_estimateGas" | "eth_feeHistory" => RpcAction::Status(503),
        _ => RpcAction::Forward,
    })
    .await;
    let (ahead, ahead_seen) = rpc_proxy(base, |_| RpcAction::Forward).await;
    let (one, two) = (format!("http://{behind}"), format!("http://{ahead}"));
    let rig = ChainRig::start(&[
        ("FACTOMAT_RPC_URL_EIP155_8453", one.as_str()),
        ("FACTOMAT_RPC_URLS_EIP155_8453", two.as_str()),
    ])
    .await;
    let request = json!({"owner": OWNER, "token": rig.stack.field("usdc"), "spender": SPENDER});

    let body = rig.pay(VM02, &request);
    assert_eq!(body["status"], "HOLD", "{body}");
    let limitations = body["limitations"].to_string();
    assert!(
        limitations.contains("eip155:8453#1 did not know the requested block yet")
            && limitations.contains("eip155:8453#1 still did not know the requested block"),
        "{limitations}"
    );
    assert!(
        ahead_seen
            .lock()
            .expect("seen")
            .iter()
            .all(|m| m == "eth_chainId")
    );

    let asked_before = behind_seen.lock().expect("seen").len();
    let body = rig.pay(VM02, &request);
    assert_eq!(body["status"], "OK", "{body}");
    assert_eq!(behind_seen.lock().expect("seen").len(), asked_before);
    assert!(!body["limitations"].to_string().contains("did not know"));

    // VM06's reads come from #2, and it names #2, not the first endpoint configured.
    let gas = rig.pay(VM06, &json!({"chain": "eip155:8453", "to": SPENDER}));
    assert_output_valid("VM06", &gas);
    assert_eq!(gas["status"], "OK", "{gas}");
    assert_eq!(gas["provider"]["url"], format!("http://{ahead}"), "{gas}");
}

/// A machine's reads end within its `overall_timeout_ms` however they are retried. Base #1
/// never answers (its attempt ends at `response_timeout_ms`) and #2 answers slower than what
/// is left: the paid call is a HOLD that says why, not work the payment gate cuts into a
/// 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_retried_past_the_machines_budget_end_in_a_hold() {
    let stack = common::devstack::shared_stack_with_mainnet();
    let base = stack.field("rpc_url");
    let (hanging, _) = rpc_proxy(base.clone(), |method| match method {
        "eth_chainId" => RpcAction::Forward,
        _ => RpcAction::Hang,
    })
    .await;
    let (slow, slow_seen) = rpc_proxy(base, |method| match method {
        "eth_chainId" => RpcAction::Forward,
        _ => RpcAction::Slow(Duration::from_secs(6)),
    })
    .await;
    let (one, two) = (format!("http://{hanging}"), format!("http://{slow}"));
    let rig = ChainRig::start(&[
        ("FACTOMAT_RPC_URL_EIP155_8453", one.as_str()),
        ("FACTOMAT_RPC_URLS_EIP155_8453", two.as_str()),
        ("FACTOMAT_ADMIN_LISTEN", "127.0.0.1:0"),
    ])
    .await;
    let request = json!({"owner": OWNER, "token": rig.stack.field("usdc"), "spender": SPENDER});

    let body = rig.pay(VM02, &request);
    assert_output_valid("VM02", &body);
    // #1 failed on its own; #2 was cut by our budget, which is not its fault: it is counted
    // as cut and not cooled down (the cool-down is shared by every reader of the chain).
    let text = rig.server.admin_metrics().await;
    assert!(
        text.contains("rpc_endpoint=\"eip155:8453#1\",result=\"error\""),
        "{text}"
    );
    assert!(
        text.contains("rpc_endpoint=\"eip155:8453#2\",result=\"cut\""),
        "{text}"
    );
    assert!(
        !text.contains("rpc_endpoint=\"eip155:8453#2\",result=\"error\""),
        "{text}"
    );
    assert_eq!(body["status"], "HOLD", "{body}");
    let limitations = body["limitations"].to_string();
    assert!(
        limitations.contains(
            "eip155:8453#1 failed (no usable answer); the read was retried on eip155:8453#2"
        ) && limitations.contains("no answer before the machine's overall_timeout_ms ran out"),
        "{limitations}"
    );
    assert!(
        slow_seen
            .lock()
            .expect("seen")
            .contains(&"eth_blockNumber".to_string())
    );
}
