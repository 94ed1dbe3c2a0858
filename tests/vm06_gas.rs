//! VM06 transaction gas preflight, paid through the official client on the dev stack, against
//! both anvils (chain ids 8453 and 1) and loopback JSON-RPC stand-ins that fail one method.

mod common;

use common::closed_port;
use common::devstack::DevStack;
use common::logs::logs;
use common::onchain::{
    ChainRig, RpcAction, assert_output_valid, calls_after_start_up, rpc_call, rpc_proxy, selector,
};
use serde_json::{Value, json};

const VM06: &str = "/v1/transaction-gas-preflight";
/// anvil account #1 (funded on both anvils).
const ADMIN: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn deploy_probe(rig: &ChainRig) -> String {
    rig.stack.chain(&["deploy", "RevertProbe"])["address"]
        .as_str()
        .expect("probe address")
        .to_string()
}

fn limitations(body: &Value) -> String {
    body["limitations"]
        .as_array()
        .expect("limitations")
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

fn u128_of(value: &Value) -> u128 {
    value
        .as_str()
        .expect("decimal string")
        .parse()
        .expect("u128")
}

/// Recomputes the stated scenario rule from the returned fee history and gas units.
fn assert_scenarios_follow_the_rule(body: &Value) {
    let gas = u128_of(&body["gas_estimate"]["gas_units"]);
    let history = &body["fee_history"];
    let base = u128_of(
        history["base_fee_per_gas"]
            .as_array()
            .expect("bases")
            .last()
            .expect("next"),
    );
    let newest = history["priority_fee_rewards"]
        .as_array()
        .expect("rewards")
        .last()
        .expect("row");
    let scenarios = body["illustrative_execution_fees"]["scenarios"]
        .as_array()
        .expect("scenarios");
    assert_eq!(scenarios.len(), 3);
    for ((scenario, percentile), reward) in scenarios
        .iter()
        .zip([10, 50, 90])
        .zip(newest.as_array().expect("row"))
    {
        let priority = u128_of(reward);
        assert_eq!(scenario["label"], format!("p{percentile}_latest_reward"));
        assert_eq!(u128_of(&scenario["base_fee_per_gas_wei"]), base);
        assert_eq!(u128_of(&scenario["priority_fee_per_gas_wei"]), priority);
        let wei = gas * (base + priority);
        assert_eq!(u128_of(&scenario["execution_fee_wei"]), wei);
        let eth = scenario["execution_fee_eth"].as_str().expect("eth");
        let (whole, frac) = eth.split_once('.').unwrap_or((eth, ""));
        let rebuilt: u128 = format!("{whole}{frac:0<18}").parse().expect("eth digits");
        assert_eq!(
            rebuilt, wei,
            "execution_fee_eth {eth} is the wei value / 1e18"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_call_on_base_gets_the_nodes_estimate_and_fee_history() {
    // A stack of its own: the node's fee history is read before the call and compared with
    // the answer's, and another test's settlement on a shared chain would mine a block between.
    let rig = ChainRig::with_own_stack(DevStack::start_with_mainnet(), &[]).await;
    let probe = deploy_probe(&rig);
    let data = selector("bump()");
    let rpc = rig.stack.field("rpc_url");
    let node_gas = rpc_call(
        &rpc,
        "eth_estimateGas",
        json!([{"from": ADMIN, "to": probe, "data": data}, "latest"]),
    )
    .await;
    let node_history = rpc_call(
        &rpc,
        "eth_feeHistory",
        json!(["0x5", "latest", [10, 50, 90]]),
    )
    .await;
    let before = rig.server.outbound();
    let body = rig.pay(
        VM06,
        &json!({"chain": "eip155:8453", "to": probe, "from": ADMIN, "data": data}),
    );
    assert_output_valid("VM06", &body);
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(
        body["chain"],
        json!({"caip2": "eip155:8453", "chain_id": 8453, "name": "Base"})
    );
    assert_eq!(
        body["request_shape"],
        json!({"has_from": true, "calldata_bytes": 4, "value_nonzero": false})
    );
    let expected_gas = u128::from_str_radix(
        node_gas["result"]
            .as_str()
            .expect("hex")
            .trim_start_matches("0x"),
        16,
    )
    .expect("gas");
    assert_eq!(u128_of(&body["gas_estimate"]["gas_units"]), expected_gas);
    let history = &body["fee_history"];
    assert_eq!(history["block_count"], 5);
    assert_eq!(history["newest_block"], "latest");
    assert_eq!(history["reward_percentiles"], json!([10, 50, 90]));
    let node = &node_history["result"];
    assert_eq!(history["oldest_block"], node["oldestBlock"]);
    let hex_to_dec = |v: &Value| {
        u128::from_str_radix(v.as_str().expect("hex").trim_start_matches("0x"), 16)
            .expect("hex")
            .to_string()
    };
    let bases: Vec<String> = node["baseFeePerGas"]
        .as_array()
        .expect("bases")
        .iter()
        .map(hex_to_dec)
        .collect();
    assert_eq!(history["base_fee_per_gas"], json!(bases));
    let rewards: Vec<Vec<String>> = node["reward"]
        .as_array()
        .expect("rewards")
        .iter()
        .map(|row| {
            row.as_array()
                .expect("row")
                .iter()
                .map(hex_to_dec)
                .collect()
        })
        .collect();
    assert_eq!(history["priority_fee_rewards"], json!(rewards));
    assert_eq!(history["gas_used_ratio"].as_array().map(Vec::len), Some(5));
    let fees = &body["illustrative_execution_fees"];
    assert_eq!(fees["covers"], "l2_execution_fee_only");
    assert_eq!(fees["l1_security_or_data_fee_included"], false);
    assert_eq!(fees["recommendation"], false);
    assert_eq!(fees["guaranteed_final_cost"], false);
    assert_eq!(fees["labeled_as_total_transaction_cost"], false);
    assert_scenarios_follow_the_rule(&body);
    assert!(
        limitations(&body).contains("layer-1 security/data fee"),
        "{body:#}"
    );
    let port = rpc.rsplit(':').next().expect("port");
    assert_eq!(body["provider"]["host"], "127.0.0.1");
    assert_eq!(body["provider"]["url"], format!("http://127.0.0.1:{port}"));
    assert_eq!(
        body["provider"]["methods"],
        json!(["eth_estimateGas", "eth_feeHistory"])
    );
    assert_eq!(body["provider"]["credential_material"], false);
    // verify + eth_estimateGas + eth_feeHistory + settle: at most 2 RPC methods.
    assert_eq!(rig.server.outbound() - before, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ethereum_is_read_on_its_own_chain_and_a_keyed_url_never_leaks() {
    let stack = common::devstack::shared_stack_with_mainnet();
    let keyed = format!(
        "{}/?apikey=SECRETKEY-vm06-4242",
        stack.field("rpc_url_eip155_1")
    );
    let rig = ChainRig::start(&[("FACTOMAT_RPC_URL_EIP155_1", keyed.as_str())]).await;
    let body = rig.pay(
        VM06,
        &json!({"chain": "eip155:1", "to": "0x00000000000000000000000000000000000000a1",
        "from": ADMIN, "value_wei": "1000000000000000000"}),
    );
    assert_output_valid("VM06", &body);
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(body["chain"]["chain_id"], 1);
    assert_eq!(body["gas_estimate"]["gas_units"], "21000");
    assert_eq!(
        body["request_shape"],
        json!({"has_from": true, "calldata_bytes": 0, "value_nonzero": true})
    );
    assert_eq!(
        body["illustrative_execution_fees"]["covers"],
        "execution_fee_only"
    );
    assert_scenarios_follow_the_rule(&body);
    let url = body["provider"]["url"].as_str().expect("url");
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.contains('?') && !url.ends_with('/'),
        "{url}"
    );
    assert!(
        !format!("{body}\n{}", logs()).contains("SECRETKEY"),
        "the RPC key leaked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverting_calls_are_unestimable_with_the_nodes_reason_or_data() {
    let rig = ChainRig::start(&[]).await;
    let probe = deploy_probe(&rig);
    let cases = [
        (
            "failWithReason()",
            vec![
                "revert reason: \"RevertProbe: refused on purpose\"",
                "revert data 0x08c379a0",
            ],
        ),
        (
            "failBare()",
            vec!["no decodable revert reason", "no revert data"],
        ),
        (
            "failCustom()",
            vec![
                "no decodable revert reason",
                "revert data 0xac333900000000000000000000000000000000000000000000000000000000000000002a",
            ],
        ),
    ];
    for (function, expected) in cases {
        let body = rig.pay(
            VM06,
            &json!({"chain": "eip155:8453", "to": probe, "data": selector(function)}),
        );
        assert_output_valid("VM06", &body);
        assert_eq!(body["status"], "UNESTIMABLE", "{function}: {body:#}");
        assert_eq!(body["gas_estimate"], Value::Null);
        assert!(
            body["fee_history"].is_object(),
            "the fee history is still observed"
        );
        assert_eq!(body["illustrative_execution_fees"], Value::Null);
        let text = limitations(&body);
        assert!(text.contains("reports that the call reverts"), "{text}");
        for needle in expected {
            assert!(
                text.contains(needle),
                "{function}: {needle:?} missing from {text}"
            );
        }
        assert!(!text.contains('\u{0}'), "control characters are stripped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_method_is_partial_and_a_dead_node_is_hold() {
    let stack = common::devstack::shared_stack_with_mainnet();
    let anvil = stack.field("rpc_url");
    let (history_down, _) = rpc_proxy(anvil.clone(), |method| match method {
        "eth_feeHistory" => RpcAction::Status(503),
        _ => RpcAction::Forward,
    })
    .await;
    let (estimate_down, seen) = rpc_proxy(anvil.clone(), |method| match method {
        "eth_estimateGas" => RpcAction::Error(json!({"code": -32603, "message": "internal error"})),
        _ => RpcAction::Forward,
    })
    .await;
    let closed = closed_port();
    let dead = format!("http://user:SECRETPASS-vm06@{}/", closed.addr);
    let history_url = format!("http://{history_down}/");
    let rig = ChainRig::start(&[
        ("FACTOMAT_RPC_URL_EIP155_8453", history_url.as_str()),
        ("FACTOMAT_RPC_URL_EIP155_1", dead.as_str()),
    ])
    .await;
    let transfer =
        |chain: &str| json!({"chain": chain, "to": "0x00000000000000000000000000000000000000a2"});

    let body = rig.pay(VM06, &transfer("eip155:8453"));
    assert_output_valid("VM06", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(body["gas_estimate"]["gas_units"], "21000");
    assert_eq!(body["fee_history"], Value::Null);
    assert_eq!(body["illustrative_execution_fees"], Value::Null);
    assert!(
        limitations(&body)
            .contains("eth_feeHistory on eip155:8453 could not be read (RPC HTTP status 503)"),
        "{body:#}"
    );

    let body = rig.pay(VM06, &transfer("eip155:1"));
    assert_output_valid("VM06", &body);
    assert_eq!(body["status"], "HOLD", "{body:#}");
    assert_eq!(body["gas_estimate"], Value::Null);
    assert_eq!(body["fee_history"], Value::Null);
    assert_eq!(body["provider"]["host"], "127.0.0.1");
    assert_eq!(
        body["provider"]["url"], "withheld",
        "an origin with userinfo is not shown"
    );
    assert!(limitations(&body).contains("carries credentials"));
    assert!(
        !format!("{body}\n{}", logs()).contains("SECRETPASS"),
        "the userinfo leaked"
    );

    let estimate_url = format!("http://{estimate_down}/");
    let other = ChainRig::start(&[("FACTOMAT_RPC_URL_EIP155_8453", estimate_url.as_str())]).await;
    let body = other.pay(VM06, &transfer("eip155:8453"));
    assert_output_valid("VM06", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(body["gas_estimate"], Value::Null);
    assert!(body["fee_history"].is_object());
    assert!(
        limitations(&body).contains(
            "eth_estimateGas on eip155:8453 could not be read (RPC error -32603: internal error)"
        ),
        "{body:#}"
    );
    // The start-up chain check (eth_chainId) is configuration work, not the call's.
    let mut methods = calls_after_start_up(&seen);
    methods.sort();
    assert_eq!(
        methods,
        ["eth_estimateGas", "eth_feeHistory"],
        "exactly the two methods"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_is_cut_by_the_response_timeout() {
    let stack = common::devstack::shared_stack_with_mainnet();
    let (silent, _) = rpc_proxy(stack.field("rpc_url"), |method| match method {
        "eth_feeHistory" => RpcAction::Hang,
        _ => RpcAction::Forward,
    })
    .await;
    let url = format!("http://{silent}/");
    let rig = ChainRig::start(&[("FACTOMAT_RPC_URL_EIP155_8453", url.as_str())]).await;
    let started = std::time::Instant::now();
    let body = rig.pay(
        VM06,
        &json!({"chain": "eip155:8453", "to": "0x00000000000000000000000000000000000000a3"}),
    );
    let elapsed = started.elapsed();
    assert_output_valid("VM06", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert!(limitations(&body).contains("RPC timed out"), "{body:#}");
    assert!(
        elapsed >= std::time::Duration::from_millis(8000)
            && elapsed < std::time::Duration::from_secs(20),
        "{elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_chain_endpoint_is_503_before_any_charge() {
    let rig = ChainRig::start(&[("FACTOMAT_RPC_URL_EIP155_1", "")]).await;
    let before = rig.buyer_balance();
    let answer = rig.pay_unchecked(
        VM06,
        &json!({"chain": "eip155:8453", "to": "0x00000000000000000000000000000000000000a4"}),
    );
    assert_eq!(answer["status"], 503, "{answer}");
    assert_eq!(answer["body"]["error"]["code"], "provider_not_configured");
    assert_eq!(rig.buyer_balance(), before, "nothing was charged");
}
