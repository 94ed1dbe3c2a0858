//! Paid paths before any payment: every input example gets a correct 402, every invalid
//! request gets a 400 with a stable code and no payment contract, and nothing goes outbound.

mod common;

use common::{BASE_URL, PAY_TO, TestServer, decode_header, expect_400, machine, manifest};
use factomat::support::canonical::canonical_sha256;
use serde_json::{Value, json};

const IDS: [&str; 11] = [
    "VM01", "VM02", "VM03", "VM04", "VM05", "VM06", "VM07", "VM08", "VM09", "VM10", "VM11",
];
const UINT256_MAX_PLUS_ONE: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639936";
const UINT256_MAX: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639935";

fn example(id: &str) -> Value {
    machine(id)["input_example"].clone()
}

fn path(id: &str) -> String {
    machine(id)["path"].as_str().expect("path").to_string()
}

/// `base` with the value at a JSON pointer replaced (or inserted).
fn with(mut base: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    let target = if parent.is_empty() {
        Some(&mut base)
    } else {
        base.pointer_mut(parent)
    };
    match target.expect("parent exists") {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            let index: usize = key.parse().expect("index");
            items[index] = value;
        }
        _ => panic!("parent of {pointer} is not a container"),
    }
    base
}

fn without(mut base: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    let target = if parent.is_empty() {
        Some(&mut base)
    } else {
        base.pointer_mut(parent)
    };
    if let Some(Value::Object(map)) = target {
        map.shift_remove(key);
    }
    base
}

#[tokio::test]
async fn every_input_example_gets_a_402_with_the_advertised_terms() {
    let server = TestServer::start().await;
    let payment = manifest()["payment"].clone();
    for id in IDS {
        let m = machine(id);
        let response = server.post_json(&path(id), &m["input_example"]).await;
        assert_eq!(response.status().as_u16(), 402, "{id}");
        assert_eq!(response.headers()["cache-control"], "no-store", "{id}");
        let expose = response.headers()["access-control-expose-headers"]
            .to_str()
            .expect("ascii");
        assert!(
            expose.contains("PAYMENT-REQUIRED") && expose.contains("PAYMENT-RESPONSE"),
            "{id}"
        );
        let header = response.headers()["payment-required"]
            .to_str()
            .expect("ascii")
            .to_string();
        assert!(
            header.len() <= 3072,
            "{id}: challenge header {} bytes; a default nginx holds 4 KiB of headers in all",
            header.len()
        );
        let required = decode_header(&header);
        let body: Value = response.json().await.expect("json body");
        for key in ["x402Version", "resource", "accepts"] {
            assert_eq!(
                body[key], required[key],
                "{id}: the body repeats the header's {key}"
            );
        }
        assert_eq!(required["x402Version"], 2, "{id}");
        assert_eq!(
            required["resource"]["url"],
            format!("{BASE_URL}{}", m["path"].as_str().expect("path")),
            "{id}"
        );
        assert_eq!(required["resource"]["mimeType"], "application/json", "{id}");
        assert_eq!(required["resource"]["description"], m["purpose"], "{id}");
        let accepts = required["accepts"].as_array().expect("accepts");
        assert_eq!(accepts.len(), 1, "{id}");
        let accept = &accepts[0];
        assert_eq!(accept["scheme"], "exact", "{id}");
        assert_eq!(accept["network"], "eip155:8453", "{id}");
        assert_eq!(accept["amount"], m["price_atomic"], "{id}");
        assert!(accept["amount"].is_string(), "{id}: amount is a string");
        assert_eq!(
            accept["asset"], "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "{id}"
        );
        assert_eq!(accept["payTo"], PAY_TO, "{id}");
        assert_eq!(
            accept["maxTimeoutSeconds"], payment["max_timeout_seconds"],
            "{id}"
        );
        assert_eq!(
            accept["extra"],
            json!({"name": "USD Coin", "version": "2"}),
            "{id}"
        );
        let bazaar = &required["extensions"]["bazaar"];
        assert_eq!(bazaar["info"]["input"]["body"], m["input_example"], "{id}");
        assert_eq!(bazaar["info"]["input"]["method"], "POST", "{id}");
        let outline = &bazaar["schema"]["properties"]["input"]["properties"]["body"];
        assert_eq!(outline["required"], m["input_schema"]["required"], "{id}");
        assert!(
            bazaar["info"].get("output").is_none(),
            "{id}: output only in the body"
        );
        let full = &body["extensions"]["bazaar"];
        assert_eq!(full["info"]["input"], bazaar["info"]["input"], "{id}");
        assert_eq!(
            full["info"]["output"]["example"], m["output_example"],
            "{id}"
        );
        assert_eq!(
            full["schema"]["properties"]["input"]["properties"]["body"], m["input_schema"],
            "{id}"
        );
    }
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn the_prices_are_the_specified_ones() {
    let expected = [
        ("VM01", "/v1/url-context", "$0.01", "10000"),
        ("VM02", "/v1/allowance-exposure", "$0.01", "10000"),
        ("VM03", "/v1/portfolio-preflight", "$0.01", "10000"),
        ("VM04", "/v1/productive-venue-snapshot", "$0.01", "10000"),
        ("VM05", "/v1/discovery-visibility", "$0.01", "10000"),
        ("VM06", "/v1/transaction-gas-preflight", "$0.005", "5000"),
        ("VM07", "/v1/web-change-snapshot", "$0.005", "5000"),
        ("VM08", "/v1/x402-service-change-snapshot", "$0.01", "10000"),
        ("VM09", "/v1/x402-presign-handoff", "$0.01", "10000"),
        ("VM10", "/v1/payment-authority-snapshot", "$0.005", "5000"),
        ("VM11", "/v1/discovery-visibility-change", "$0.005", "5000"),
    ];
    let server = TestServer::start().await;
    for (id, route, price, atomic) in expected {
        let m = machine(id);
        assert_eq!(
            (m["path"].as_str(), m["price"].as_str()),
            (Some(route), Some(price)),
            "{id}"
        );
        let response = server.post_json(route, &m["input_example"]).await;
        let required = common::payment_required(&response);
        assert_eq!(required["accepts"][0]["amount"], atomic, "{id}");
    }
}

/// Generic rejections derived from each machine's own schema: every required field missing,
/// an unknown field, a wrong type for every required field, and malformed bodies.
#[tokio::test]
async fn generic_rejections_for_every_machine() {
    let server = TestServer::start().await;
    let mut cases = 0;
    for id in IDS {
        let m = machine(id);
        let base = m["input_example"].clone();
        let route = path(id);
        let required: Vec<String> = m["input_schema"]["required"]
            .as_array()
            .expect("required")
            .iter()
            .map(|v| v.as_str().expect("name").to_string())
            .collect();
        for name in &required {
            let mut body = base.clone();
            if body.get(name).is_none() {
                continue;
            }
            body = without(body, &format!("/{name}"));
            if body.as_object().is_some_and(|o| o.is_empty()) {
                continue;
            }
            let error = expect_400(
                server.post_json(&route, &body).await,
                "missing_field",
                &format!("{id} without {name}"),
            )
            .await;
            assert_eq!(error["field"], format!("/{name}"), "{id}");
            cases += 1;
        }
        let error = expect_400(
            server
                .post_json(&route, &with(base.clone(), "/surprise_field", json!(1)))
                .await,
            "unknown_field",
            &format!("{id} extra field"),
        )
        .await;
        assert_eq!(error["field"], "/surprise_field");
        cases += 1;
        for name in &required {
            let declared = m["input_schema"]["properties"][name]["type"]
                .as_str()
                .unwrap_or("string");
            let wrong = if declared == "string" {
                json!(12345)
            } else {
                json!("not-the-right-type")
            };
            let error = expect_400(
                server
                    .post_json(&route, &with(base.clone(), &format!("/{name}"), wrong))
                    .await,
                "invalid_type",
                &format!("{id} {name} of the wrong type"),
            )
            .await;
            assert_eq!(error["field"], format!("/{name}"));
            cases += 1;
        }
        let malformed: [(&[u8], &str); 8] = [
            (b"{", "invalid_json"),
            (b"{\"a\":}", "invalid_json"),
            (b"{\"a\":\"\xff\"}", "invalid_json"),
            (b"", "empty_body"),
            (b"   ", "empty_body"),
            (b"[]", "invalid_body"),
            (b"null", "invalid_body"),
            (b"{}", "empty_request"),
        ];
        for (raw, code) in malformed {
            expect_400(
                server.post_raw(&route, raw.to_vec()).await,
                code,
                &format!("{id} body {:?}", String::from_utf8_lossy(raw)),
            )
            .await;
            cases += 1;
        }
    }
    assert!(cases >= 100, "only {cases} generic cases");
    assert_eq!(server.outbound(), 0, "no 400 sends anything outbound");
}

fn vm07_baseline() -> Value {
    let h = |c: char| c.to_string().repeat(64);
    let components = json!({
        "final_url": h('a'), "http": h('b'), "metadata": h('c'),
        "outline": h('d'), "content": h('e'), "structured_data": h('f'),
    });
    let mut baseline = json!({
        "methodology_version": "web-change-snapshot-0.1.0",
        "components": components,
        "content_truncated": false,
        "extraction_complete": true,
    });
    baseline["page_sha256"] = json!(canonical_sha256(&baseline));
    baseline
}

fn vm08_baseline() -> Value {
    let fingerprint = json!({
        "requirement_count": 1,
        "requirements": [{
            "scheme": "exact", "network": "eip155:8453",
            "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amount": "10000",
            "pay_to": "0x7d9e3a1c5b2f4e6a8c0d1e2f3a4b5c6d7e8f9a0b", "max_timeout_seconds": 60,
            "extra": {"name": "USD Coin", "version": "2"},
            "resource_url": "https://api.example.com/v1/quote",
        }],
    });
    seal_vm08(json!({
        "reusable": true,
        "methodology_version": "x402-service-change-snapshot-0.1.0",
        "provenance": "direct_service",
        "resource_url": "https://api.example.com/v1/quote",
        "method": "GET",
        "body_sha256": null,
        "observed_at": "2026-11-01T00:00:00Z",
        "fingerprint_sha256": canonical_sha256(&fingerprint),
        "fingerprint": fingerprint,
        "hold_reason": null,
    }))
}

/// Seals a VM08 baseline as the service does: baseline_sha256 over the rest.
fn seal_vm08(mut baseline: Value) -> Value {
    let unsealed = without(baseline.clone(), "/baseline_sha256");
    baseline["baseline_sha256"] = json!(canonical_sha256(&unsealed));
    baseline
}

fn vm10_baseline() -> Value {
    let mut sealed = json!({
        "methodology_version": "payment-authority-snapshot-0.1.0",
        "resource_url": "https://api.example.com/v1/quote",
        "method": "POST",
        "body_sha256": canonical_sha256(&json!({"symbol": "ETH"})),
        "payer_address": "0x5a0b54d5dc17e0aadc383d2db43b0a0d3e029c4c",
        "selected_requirement": null,
        "balance_raw": "25000000",
        "allowance_raw": null,
        "authority_path": "eip3009_authorization",
        "recovery_path": "none_required",
        "evidence_block_number": "1",
    });
    let seal = canonical_sha256(&sealed);
    sealed["baseline_sha256"] = json!(seal);
    sealed
}

fn vm11_baseline(queries: &[&str]) -> Value {
    let observation = json!({
        "merchant_presence": "FOUND",
        "searches": queries.iter().map(|q| json!({"query": q, "visibility": "IN_TOP_20", "position": 1})).collect::<Vec<_>>(),
    });
    let mut sealed = json!({
        "methodology_version": "discovery-visibility-change-0.1.0",
        "resource": "https://api.example.com/v1/weather",
        "pay_to": "0x7d9e3a1c5b2f4e6a8c0d1e2f3a4b5c6d7e8f9a0b",
        "queries": queries,
        "search_window": 20, "merchant_page_limit": 20, "merchant_page_offset": 0,
        "observation_sha256": canonical_sha256(&observation),
        "observation": observation,
        "observed_at": "2026-11-01T00:00:00Z",
        "reusable": true, "observation_complete": true,
    });
    let seal = canonical_sha256(&sealed);
    sealed["baseline_sha256"] = json!(seal);
    sealed
}

/// Machine-specific structural rules: (machine, request, expected code, expected field).
fn specific_cases() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    let vm02 = example("VM02");
    let vm03 = example("VM03");
    let vm04 = example("VM04");
    let vm05 = example("VM05");
    let vm06 = example("VM06");
    let vm07 = example("VM07");
    let vm08 = example("VM08");
    let vm09 = example("VM09");
    let vm10 = example("VM10");
    let vm11 = example("VM11");
    let zero = json!("0x0000000000000000000000000000000000000000");
    let bad_checksum = json!("0x833589fcD6eDb6E08f4c7C32D4f71b54bdA02913");
    let holding = |token: Value, quantity: &str| json!({"chain": "eip155:8453", "token": token, "quantity_raw": quantity});
    let usdc = json!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
    let mut tampered07 = vm07_baseline();
    tampered07["components"]["content"] = json!("0".repeat(64));
    let mut tampered08 = vm08_baseline();
    tampered08["fingerprint"]["requirements"][0]["amount"] = json!("1");
    let mut flag_edited08 = vm08_baseline();
    flag_edited08["observed_at"] = json!("2026-11-02T00:00:00Z");
    let not_reusable08 = seal_vm08(with(vm08_baseline(), "/reusable", json!(false)));
    let mut tampered10 = vm10_baseline();
    tampered10["balance_raw"] = json!("99999999999");
    let queries = ["weather api", "x402 weather forecast"];
    let mut tampered11 = vm11_baseline(&queries);
    tampered11["observation"]["merchant_presence"] = json!("NOT_FOUND");
    let mut reobserved11 = vm11_baseline(&queries);
    reobserved11["observation"]["merchant_presence"] = json!("NOT_FOUND");
    reobserved11["observation_sha256"] = json!(canonical_sha256(&reobserved11["observation"]));
    let mut foreign11 = vm11_baseline(&queries);
    foreign11["resource"] = json!("https://api.example.com/v1/other");
    let unsealed = without(foreign11.clone(), "/baseline_sha256");
    foreign11["baseline_sha256"] = json!(canonical_sha256(&unsealed));
    let other_queries = vm11_baseline(&["other query", "weather api"]);
    let mut vm06_ctrl = Vec::new();
    for (field, value) in [
        ("nonce", json!(1)),
        ("gas", json!("21000")),
        ("gasPrice", json!("1")),
        ("maxFeePerGas", json!("1")),
        ("maxPriorityFeePerGas", json!("1")),
        ("accessList", json!([])),
        ("stateOverride", json!({})),
    ] {
        let code: &'static str =
            Box::leak(format!("unsupported_execution_control_{field}").into_boxed_str());
        let at: &'static str = Box::leak(format!("/{field}").into_boxed_str());
        vm06_ctrl.push(("VM06", with(vm06.clone(), at, value), code, at));
    }
    for field in ["rpc_url", "rpcUrl", "rpc", "provider_url", "endpoint"] {
        let at: &'static str = Box::leak(format!("/{field}").into_boxed_str());
        vm06_ctrl.push((
            "VM06",
            with(vm06.clone(), at, json!("https://rpc.example.com/")),
            "unsupported_rpc_host",
            at,
        ));
    }
    let mut cases = vec![
        (
            "VM02",
            with(vm02.clone(), "/token", zero.clone()),
            "zero_token_address",
            "/token",
        ),
        (
            "VM02",
            with(vm02.clone(), "/owner", bad_checksum.clone()),
            "invalid_address_checksum",
            "/owner",
        ),
        (
            "VM02",
            with(vm02.clone(), "/spender", json!("0x1234")),
            "invalid_address",
            "/spender",
        ),
        (
            "VM02",
            with(
                vm02.clone(),
                "/owner",
                json!("833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
            ),
            "invalid_address",
            "/owner",
        ),
        (
            "VM02",
            with(vm02.clone(), "/chain", json!("eip155:1")),
            "unsupported_chain_field",
            "/chain",
        ),
        (
            "VM02",
            with(vm02.clone(), "/permit2", json!(true)),
            "unsupported_permit2",
            "/permit2",
        ),
        (
            "VM03",
            with(vm03.clone(), "/chains", json!(["eip155:1", "eip155:1"])),
            "duplicate_items",
            "/chains",
        ),
        (
            "VM03",
            with(vm03.clone(), "/chains", json!(["eip155:10"])),
            "unsupported_chain",
            "/chains/0",
        ),
        (
            "VM03",
            with(vm03.clone(), "/chains", json!([])),
            "too_few_items",
            "/chains",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/chains",
                json!(["eip155:1", "eip155:8453", "eip155:1"]),
            ),
            "too_many_items",
            "/chains",
        ),
        (
            "VM03",
            with(vm03.clone(), "/address", json!("0x12")),
            "invalid_address",
            "/address",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!(
                    (0..11)
                        .map(|_| holding(usdc.clone(), "1"))
                        .collect::<Vec<_>>()
                ),
            ),
            "too_many_items",
            "/declared_holdings",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!([holding(zero.clone(), "1")]),
            ),
            "zero_token_address",
            "/declared_holdings/0/token",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!([holding(usdc.clone(), UINT256_MAX_PLUS_ONE)]),
            ),
            "uint256_out_of_range",
            "/declared_holdings/0/quantity_raw",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!([holding(usdc.clone(), "007")]),
            ),
            "invalid_integer_string",
            "/declared_holdings/0/quantity_raw",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!([{"chain": "eip155:8453", "token": usdc, "quantity_raw": "1", "note": "x"}]),
            ),
            "unknown_field",
            "/declared_holdings/0/note",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!([{"chain": "eip155:8453", "token": usdc}]),
            ),
            "missing_field",
            "/declared_holdings/0/quantity_raw",
        ),
        (
            "VM03",
            with(
                vm03.clone(),
                "/declared_holdings",
                json!([{"chain": "eip155:1", "token": usdc, "quantity_raw": "1"}]),
            ),
            "declared_holding_chain_not_requested",
            "/declared_holdings/0/chain",
        ),
        (
            "VM04",
            with(
                vm04.clone(),
                "/asset",
                json!({"kind": "symbol", "symbol": "stETH"}),
            ),
            "unsupported_symbol",
            "/asset/symbol",
        ),
        (
            "VM04",
            with(
                vm04.clone(),
                "/asset",
                json!({"kind": "symbol", "symbol": "DOGE"}),
            ),
            "unsupported_symbol",
            "/asset/symbol",
        ),
        (
            "VM04",
            with(vm04.clone(), "/asset", json!({"kind": "symbol"})),
            "missing_field",
            "/asset/symbol",
        ),
        (
            "VM04",
            with(vm04.clone(), "/asset", json!({"kind": "erc20"})),
            "missing_field",
            "/asset/address",
        ),
        (
            "VM04",
            with(
                vm04.clone(),
                "/asset",
                json!({"kind": "erc20", "address": zero}),
            ),
            "zero_token_address",
            "/asset/address",
        ),
        (
            "VM04",
            with(
                vm04.clone(),
                "/asset",
                json!({"kind": "native", "address": usdc}),
            ),
            "asset_field_not_allowed",
            "/asset/address",
        ),
        (
            "VM04",
            with(
                vm04.clone(),
                "/asset",
                json!({"kind": "native", "chain": 1}),
            ),
            "unknown_field",
            "/asset/chain",
        ),
        (
            "VM04",
            with(vm04.clone(), "/asset", json!({"kind": "wrapped"})),
            "invalid_value",
            "/asset/kind",
        ),
        (
            "VM04",
            with(vm04.clone(), "/chain_id", json!(10)),
            "unsupported_chain",
            "/chain_id",
        ),
        (
            "VM04",
            with(vm04.clone(), "/limit", json!(0)),
            "out_of_range",
            "/limit",
        ),
        (
            "VM04",
            with(vm04.clone(), "/limit", json!(21)),
            "out_of_range",
            "/limit",
        ),
        (
            "VM04",
            with(vm04.clone(), "/sort", json!("best")),
            "invalid_value",
            "/sort",
        ),
        (
            "VM04",
            with(vm04.clone(), "/venue_types", json!(["lending", "lending"])),
            "duplicate_items",
            "/venue_types",
        ),
        (
            "VM04",
            with(vm04.clone(), "/protocols", json!(["compound"])),
            "invalid_value",
            "/protocols/0",
        ),
        (
            "VM04",
            with(vm04.clone(), "/amount", json!("100")),
            "unsupported_position_sizing",
            "/amount",
        ),
        (
            "VM05",
            with(
                vm05.clone(),
                "/resource",
                json!("http://api.example.com/v1/weather"),
            ),
            "url_scheme_not_https",
            "/resource",
        ),
        (
            "VM05",
            with(
                vm05.clone(),
                "/resource",
                json!("https://api.example.com:8443/v1/weather"),
            ),
            "url_port_not_allowed",
            "/resource",
        ),
        (
            "VM05",
            with(vm05.clone(), "/pay_to", json!("0xnothex")),
            "invalid_address",
            "/pay_to",
        ),
        (
            "VM05",
            with(vm05.clone(), "/queries", json!([])),
            "too_few_items",
            "/queries",
        ),
        (
            "VM05",
            with(vm05.clone(), "/queries", json!(["aa", "bb", "cc", "dd"])),
            "too_many_items",
            "/queries",
        ),
        (
            "VM05",
            with(vm05.clone(), "/queries", json!(["a"])),
            "too_short",
            "/queries/0",
        ),
        (
            "VM05",
            with(vm05.clone(), "/queries", json!(["q".repeat(401)])),
            "too_long",
            "/queries/0",
        ),
        (
            "VM05",
            with(vm05.clone(), "/queries", json!(["  a   "])),
            "invalid_query",
            "/queries/0",
        ),
        (
            "VM05",
            with(
                vm05.clone(),
                "/queries",
                json!(["weather  api", "weather api"]),
            ),
            "duplicate_query",
            "/queries",
        ),
        (
            "VM06",
            with(vm06.clone(), "/data", json!("0x123")),
            "invalid_hex",
            "/data",
        ),
        (
            "VM06",
            with(vm06.clone(), "/data", json!("0xzz")),
            "invalid_hex",
            "/data",
        ),
        (
            "VM06",
            with(
                vm06.clone(),
                "/data",
                json!(format!("0x{}", "ab".repeat(8193))),
            ),
            "calldata_too_large",
            "/data",
        ),
        (
            "VM06",
            with(vm06.clone(), "/value_wei", json!(UINT256_MAX_PLUS_ONE)),
            "uint256_out_of_range",
            "/value_wei",
        ),
        (
            "VM06",
            with(vm06.clone(), "/value_wei", json!("-1")),
            "invalid_integer_string",
            "/value_wei",
        ),
        (
            "VM06",
            with(vm06.clone(), "/value_wei", json!(1)),
            "invalid_type",
            "/value_wei",
        ),
        (
            "VM06",
            with(vm06.clone(), "/chain", json!("eip155:10")),
            "unsupported_chain",
            "/chain",
        ),
        (
            "VM06",
            with(vm06.clone(), "/to", bad_checksum.clone()),
            "invalid_address_checksum",
            "/to",
        ),
        (
            "VM06",
            with(vm06.clone(), "/from", json!("0x12")),
            "invalid_address",
            "/from",
        ),
        (
            "VM07",
            with(
                vm07.clone(),
                "/baseline",
                with(
                    vm07_baseline(),
                    "/methodology_version",
                    json!("web-change-snapshot-9.9.9"),
                ),
            ),
            "baseline_methodology_mismatch",
            "/baseline/methodology_version",
        ),
        (
            "VM07",
            with(vm07.clone(), "/baseline", tampered07),
            "baseline_tampered",
            "/baseline/page_sha256",
        ),
        (
            "VM07",
            with(
                vm07.clone(),
                "/baseline",
                without(vm07_baseline(), "/components/outline"),
            ),
            "missing_field",
            "/baseline/components/outline",
        ),
        (
            "VM07",
            with(
                vm07.clone(),
                "/baseline",
                with(vm07_baseline(), "/components/body", json!("a".repeat(64))),
            ),
            "unknown_field",
            "/baseline/components/body",
        ),
        (
            "VM07",
            with(
                vm07.clone(),
                "/baseline",
                with(vm07_baseline(), "/components/http", json!("A".repeat(64))),
            ),
            "invalid_sha256",
            "/baseline/components/http",
        ),
        (
            "VM07",
            with(
                vm07.clone(),
                "/baseline",
                with(vm07_baseline(), "/page_sha256", json!("abc")),
            ),
            "invalid_sha256",
            "/baseline/page_sha256",
        ),
        (
            "VM07",
            with(
                vm07.clone(),
                "/baseline",
                with(vm07_baseline(), "/page_body", json!("<html>")),
            ),
            "unknown_field",
            "/baseline/page_body",
        ),
        (
            "VM07",
            with(vm07.clone(), "/previous_body", json!("<html>")),
            "unsupported_baseline_body",
            "/previous_body",
        ),
        (
            "VM08",
            with(
                with(vm08.clone(), "/method", json!("GET")),
                "/body",
                json!({}),
            ),
            "body_not_allowed_for_get",
            "/body",
        ),
        (
            "VM08",
            with(vm08.clone(), "/method", json!("PUT")),
            "unsupported_method",
            "/method",
        ),
        (
            "VM08",
            with(
                vm08.clone(),
                "/price_policy",
                json!({"modest_increase_bps": 500, "max_increase_bps": 100}),
            ),
            "invalid_price_policy",
            "/price_policy",
        ),
        (
            "VM08",
            with(
                vm08.clone(),
                "/price_policy",
                json!({"modest_increase_bps": 5, "max_increase_bps": 10, "floor": 1}),
            ),
            "unknown_field",
            "/price_policy/floor",
        ),
        (
            "VM08",
            with(
                vm08.clone(),
                "/resource_url",
                json!("https://10.1.2.3/v1/quote"),
            ),
            "url_host_not_public",
            "/resource_url",
        ),
        (
            "VM08",
            with(
                vm08.clone(),
                "/baseline",
                with(
                    vm08_baseline(),
                    "/methodology_version",
                    json!("x402-service-change-snapshot-0.0.1"),
                ),
            ),
            "baseline_methodology_mismatch",
            "/baseline/methodology_version",
        ),
        (
            "VM08",
            with(vm08.clone(), "/baseline", tampered08),
            "baseline_tampered",
            "/baseline/fingerprint_sha256",
        ),
        (
            "VM08",
            with(vm08.clone(), "/baseline", flag_edited08),
            "baseline_tampered",
            "/baseline/baseline_sha256",
        ),
        (
            "VM08",
            with(vm08.clone(), "/baseline", not_reusable08),
            "baseline_not_reusable",
            "/baseline/reusable",
        ),
        (
            "VM08",
            with(vm08.clone(), "/payment_signature", json!("x")),
            "unsupported_target_payment",
            "/payment_signature",
        ),
        (
            "VM09",
            with(vm09.clone(), "/allowed_pay_to", json!([])),
            "too_few_items",
            "/allowed_pay_to",
        ),
        (
            "VM09",
            with(vm09.clone(), "/allowed_pay_to", json!(["0x12"])),
            "invalid_address",
            "/allowed_pay_to/0",
        ),
        (
            "VM09",
            with(vm09.clone(), "/allowed_pay_to", json!([bad_checksum])),
            "invalid_address_checksum",
            "/allowed_pay_to/0",
        ),
        (
            "VM09",
            with(vm09.clone(), "/max_amount_atomic", json!("-5")),
            "invalid_integer_string",
            "/max_amount_atomic",
        ),
        (
            "VM09",
            with(
                vm09.clone(),
                "/max_amount_atomic",
                json!(UINT256_MAX_PLUS_ONE),
            ),
            "uint256_out_of_range",
            "/max_amount_atomic",
        ),
        (
            "VM09",
            with(vm09.clone(), "/max_amount_atomic", json!(10000)),
            "invalid_type",
            "/max_amount_atomic",
        ),
        (
            "VM09",
            with(
                with(vm09.clone(), "/method", json!("GET")),
                "/body",
                json!({"a": 1}),
            ),
            "body_not_allowed_for_get",
            "/body",
        ),
        (
            "VM09",
            with(
                vm09.clone(),
                "/resource_url",
                json!("https://user:pw@api.example.com/v1/quote"),
            ),
            "url_userinfo_not_allowed",
            "/resource_url",
        ),
        (
            "VM09",
            with(vm09.clone(), "/signature", json!("0x00")),
            "unsupported_signing",
            "/signature",
        ),
        (
            "VM10",
            with(
                vm10.clone(),
                "/baseline",
                without(vm10_baseline(), "/baseline_sha256"),
            ),
            "missing_field",
            "/baseline/baseline_sha256",
        ),
        (
            "VM10",
            with(vm10.clone(), "/baseline", tampered10),
            "baseline_tampered",
            "/baseline/baseline_sha256",
        ),
        (
            "VM10",
            with(
                vm10.clone(),
                "/baseline",
                with(
                    vm10_baseline(),
                    "/methodology_version",
                    json!("payment-authority-snapshot-9.0.0"),
                ),
            ),
            "baseline_methodology_mismatch",
            "/baseline/methodology_version",
        ),
        (
            "VM10",
            with(
                with(vm10.clone(), "/method", json!("GET")),
                "/body",
                json!({}),
            ),
            "body_not_allowed_for_get",
            "/body",
        ),
        (
            "VM10",
            with(
                vm10.clone(),
                "/spender",
                json!("0x000000000022D473030F116dDEE9F6B43aC78BA3"),
            ),
            "unsupported_spender",
            "/spender",
        ),
        (
            "VM10",
            with(
                vm10.clone(),
                "/resource_url",
                json!("https://localhost/v1/quote"),
            ),
            "url_host_name_not_allowed",
            "/resource_url",
        ),
        (
            "VM11",
            with(
                vm11.clone(),
                "/queries",
                json!(["weather api", " weather   api "]),
            ),
            "duplicate_query",
            "/queries",
        ),
        (
            "VM11",
            with(vm11.clone(), "/baseline", foreign11),
            "baseline_foreign",
            "/baseline/resource",
        ),
        (
            "VM11",
            with(vm11.clone(), "/baseline", other_queries),
            "baseline_foreign",
            "/baseline/queries",
        ),
        (
            "VM11",
            with(vm11.clone(), "/baseline", tampered11),
            "baseline_tampered",
            "/baseline/observation_sha256",
        ),
        (
            "VM11",
            with(vm11.clone(), "/baseline", reobserved11),
            "baseline_tampered",
            "/baseline/baseline_sha256",
        ),
        (
            "VM11",
            with(
                vm11.clone(),
                "/baseline",
                with(
                    vm11_baseline(&queries),
                    "/methodology_version",
                    json!("bazaar-visibility-change-0.1.0"),
                ),
            ),
            "baseline_methodology_mismatch",
            "/baseline/methodology_version",
        ),
        (
            "VM11",
            with(
                vm11.clone(),
                "/baseline",
                without(vm11_baseline(&queries), "/observation"),
            ),
            "missing_field",
            "/baseline/observation",
        ),
        (
            "VM11",
            with(vm11.clone(), "/schedule", json!("hourly")),
            "unsupported_monitoring_schedule",
            "/schedule",
        ),
    ];
    cases.extend(vm06_ctrl);
    cases
}

#[tokio::test]
async fn machine_specific_rules_reject_before_payment() {
    let server = TestServer::start().await;
    let cases = specific_cases();
    assert!(cases.len() >= 80, "{} cases", cases.len());
    for (i, (id, body, code, field)) in cases.iter().enumerate() {
        let context = format!("case {i} {id} {code}");
        let error = expect_400(server.post_json(&path(id), body).await, code, &context).await;
        assert_eq!(error["field"], *field, "{context}: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains("\"^"),
            "{context}: a 400 says what is wanted, never a regular expression: {message}"
        );
    }
    assert_eq!(server.outbound(), 0, "no 400 sends anything outbound");
}

#[tokio::test]
async fn valid_variants_reach_402() {
    let queries = ["weather api", "x402 weather forecast"];
    let cases = vec![
        (
            "VM03",
            json!({"address": "0x5a0b54d5dc17e0aadc383d2db43b0a0d3e029c4c"}),
        ),
        (
            "VM03",
            json!({"address": "0x5a0b54d5dc17e0aadc383d2db43b0a0d3e029c4c", "chains": ["eip155:1", "eip155:8453"],
            "declared_holdings": [{"chain": "eip155:1", "token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "quantity_raw": UINT256_MAX}]}),
        ),
        ("VM04", json!({"chain_id": 1, "asset": {"kind": "native"}})),
        (
            "VM04",
            json!({"chain_id": 1, "asset": {"kind": "symbol", "symbol": "stETH"}, "venue_types": ["liquid_staking"], "protocols": ["lido"], "sort": "rate_asc", "limit": 1}),
        ),
        (
            "VM04",
            json!({"chain_id": 8453, "asset": {"kind": "erc20", "address": "0xc1CBa3fCea344f92D9239c08C0568f6F2F0ee452"}, "limit": 20}),
        ),
        (
            "VM06",
            json!({"chain": "eip155:1", "to": "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913", "data": format!("0x{}", "ab".repeat(8192)), "value_wei": UINT256_MAX}),
        ),
        (
            "VM06",
            json!({"chain": "eip155:8453", "to": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"}),
        ),
        (
            "VM07",
            json!({"url": "https://example.com/changelog", "baseline": vm07_baseline()}),
        ),
        (
            "VM08",
            json!({"resource_url": "https://api.example.com/v1/quote", "method": "GET", "baseline": vm08_baseline(), "price_policy": {"modest_increase_bps": 500, "max_increase_bps": 2000}}),
        ),
        (
            "VM09",
            json!({"resource_url": "https://api.example.com/v1/quote", "method": "GET", "payer_address": "0x5a0b54d5dc17e0aadc383d2db43b0a0d3e029c4c", "max_amount_atomic": "0", "allowed_pay_to": ["0x7d9e3a1c5b2f4e6a8c0d1e2f3a4b5c6d7e8f9a0b"]}),
        ),
        ("VM10", with(example("VM10"), "/baseline", vm10_baseline())),
        (
            "VM11",
            with(example("VM11"), "/baseline", vm11_baseline(&queries)),
        ),
        (
            "VM11",
            with(
                example("VM11"),
                "/queries",
                json!(["  x402   weather forecast", "weather\tapi"]),
            ),
        ),
    ];
    let server = TestServer::start().await;
    for (id, body) in cases {
        let response = server.post_json(&path(id), &body).await;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        assert_eq!(status, 402, "{id} {body}: {text}");
    }
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn size_limits_and_content_type_are_checked_first() {
    let server = TestServer::start().await;
    let vm06 = path("VM06");
    let padding = "x".repeat(21_000);
    let oversized = format!(
        "{{\"chain\":\"eip155:8453\",\"to\":\"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913\",\"pad\":\"{padding}\"}}"
    );
    expect_400(
        server.post_raw(&vm06, oversized.into_bytes()).await,
        "body_too_large",
        "VM06 20 KiB",
    )
    .await;
    let garbage_but_big = vec![b'{'; 40_000];
    expect_400(
        server.post_raw(&path("VM08"), garbage_but_big).await,
        "body_too_large",
        "VM08 size before JSON",
    )
    .await;
    for (content_types, code) in [
        (&["text/plain"][..], "unsupported_content_type"),
        (
            &["application/json", "text/plain"],
            "duplicate_content_type",
        ),
        (
            &["application/json", "application/json"],
            "duplicate_content_type",
        ),
    ] {
        let mut request = server
            .client
            .post(format!("{}{}", server.url, path("VM01")))
            .body(r#"{"url":"https://example.com/"}"#);
        for content_type in content_types {
            request = request.header("content-type", *content_type);
        }
        let response = request.send().await.expect("answered");
        expect_400(response, code, &format!("{content_types:?}")).await;
    }
    let chunked = server
        .client
        .post(format!("{}{}", server.url, path("VM07")))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            (0..20).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024])),
        )))
        .send()
        .await
        .expect("answered");
    expect_400(chunked, "body_too_large", "chunked body without length").await;
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn payments_without_a_facilitator_and_a_missing_payee_get_503_after_validation() {
    let server = TestServer::start().await;
    let vm02 = machine("VM02");
    let response = server
        .client
        .post(format!("{}{}", server.url, path("VM02")))
        .header("content-type", "application/json")
        .header("PAYMENT-SIGNATURE", "eyJ4NDAyVmVyc2lvbiI6Mn0=")
        .json(&vm02["input_example"])
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 503);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["error"]["code"], "service_disabled",
        "no facilitator is configured"
    );

    let disabled = TestServer::with_env(&[]).await;
    let response = disabled
        .post_json(&path("VM02"), &vm02["input_example"])
        .await;
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().get("payment-required").is_none());
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "service_disabled");
    let invalid = disabled
        .post_json(&path("VM02"), &json!({"owner": "x"}))
        .await;
    assert_eq!(
        invalid.status().as_u16(),
        400,
        "validation still runs first"
    );
    assert_eq!(server.outbound() + disabled.outbound(), 0);
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods_get_json_errors() {
    let server = TestServer::start().await;
    let response = server.get("/v1/nothing-here").await;
    assert_eq!(response.status().as_u16(), 404);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "not_found");

    let response = server.get(&path("VM01")).await;
    assert_eq!(response.status().as_u16(), 405);
    assert_eq!(response.headers()["allow"], "POST, OPTIONS");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "method_not_allowed");

    let response = server.post_json("/v1/catalog", &json!({})).await;
    assert_eq!(response.status().as_u16(), 405);
    assert_eq!(response.headers()["allow"], "GET, HEAD, OPTIONS");

    // The preflight a browser sends before the official fetch client's paid retry: every
    // header it asks for must be allowed (names compare without case), or the retry is
    // blocked and the buyer cannot pay.
    let asked = "access-control-expose-headers,content-type,payment-signature";
    let response = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}{}", server.url, path("VM01")),
        )
        .header("origin", "https://buyer.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", asked)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 204);
    let allowed: Vec<String> = response.headers()["access-control-allow-headers"]
        .to_str()
        .expect("ascii")
        .split(',')
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    for header in asked.split(',') {
        assert!(
            allowed.iter().any(|a| a == header),
            "{header} not allowed: {allowed:?}"
        );
    }
    assert_eq!(server.outbound(), 0);
}
