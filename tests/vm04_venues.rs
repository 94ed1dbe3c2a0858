//! VM04 productive venue snapshot, paid through the official client on the dev stack: Aave v3
//! stand-ins placed at the real PoolAddressesProvider addresses on both anvils, and a loopback
//! Lido API speaking the real `/v1/protocol/steth/apr/sma` shape.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::closed_port;
use common::devstack::DevStack;
use common::onchain::{ChainRig, assert_output_valid, serve};
use serde_json::{Value, json};
use warp::Filter;

const VM04: &str = "/v1/productive-venue-snapshot";
const PROVIDER_1: &str = "0x2f39d218133AFaB8F2B819B1066c7E434Ad94E9e";
const PROVIDER_8453: &str = "0xe20fCBdBfFC4Dd138cE8b2E6FBb6CB49777ad64D";
const WETH_1: &str = "0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2";
const WSTETH_1: &str = "0x7f39C581F595B53c5cb19bD0b3f8dA6c935E2Ca0";
const USDC_8453: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const WSTETH_8453: &str = "0xc1CBa3fCea344f92D9239c08C0568f6F2F0ee452";
const A_TOKEN: &str = "0x00000000000000000000000000000000000a7043";

#[derive(Clone)]
enum LidoMode {
    /// smaApr and the aprs window, as the API sends them (percent).
    Sma(Value),
    Status(u16),
    Malformed,
    Hang,
}

struct Lido {
    url: String,
    mode: Arc<Mutex<LidoMode>>,
    hits: Arc<AtomicU64>,
}

impl Lido {
    async fn start(mode: LidoMode) -> Lido {
        let mode = Arc::new(Mutex::new(mode));
        let hits = Arc::new(AtomicU64::new(0));
        let (m, h) = (mode.clone(), hits.clone());
        let route = warp::path!("v1" / "protocol" / "steth" / "apr" / "sma")
            .and(warp::get())
            .then(move || {
                let (mode, hits) = (m.clone(), h.clone());
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let current = mode.lock().expect("mode").clone();
                    let (status, body) = match current {
                        LidoMode::Sma(data) => (200, json!({"data": data, "meta": {"symbol": "stETH",
                            "address": "0xae7ab96520DE3A18E5e111B5EaAb095312D7fE84", "chainId": 1}}).to_string()),
                        LidoMode::Status(code) => (code, json!({"statusCode": code, "message": "ThrottlerException: Too Many Requests"}).to_string()),
                        LidoMode::Malformed => (200, "{\"data\": {\"smaApr\": 3.1,".to_string()),
                        LidoMode::Hang => {
                            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                            (200, String::new())
                        }
                    };
                    http::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(body)
                        .expect("response")
                }
            });
        let addr = serve(route).await;
        Lido {
            url: format!("http://{addr}"),
            mode,
            hits,
        }
    }

    fn set(&self, mode: LidoMode) {
        *self.mode.lock().expect("mode") = mode;
    }

    fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

fn sma(sma: f64) -> LidoMode {
    LidoMode::Sma(json!({"aprs": [
        {"timeUnix": 1779000000, "apr": 3.1},
        {"timeUnix": 1779172800, "apr": 2.95},
        {"timeUnix": 1779086400, "apr": 3.0}
    ], "smaApr": sma}))
}

/// The Aave stand-ins placed on one chain of a test's stack.
struct AavePool<'a> {
    stack: &'a DevStack,
    chain: u64,
    address: String,
}

impl<'a> AavePool<'a> {
    fn place(stack: &'a DevStack, chain: u64) -> Self {
        let answer = Self::run(stack, chain, &["aave-setup", Self::provider(chain)]);
        let address = answer["pool"]
            .as_str()
            .unwrap_or_else(|| panic!("aave-setup: {answer}"))
            .to_string();
        AavePool {
            stack,
            chain,
            address,
        }
    }

    fn provider(chain: u64) -> &'static str {
        if chain == 1 {
            PROVIDER_1
        } else {
            PROVIDER_8453
        }
    }

    fn run(stack: &DevStack, chain: u64, args: &[&str]) -> Value {
        if chain == 1 {
            stack.chain_mainnet(args)
        } else {
            stack.chain(args)
        }
    }

    /// Sets one reserve's supply and borrow rates (ray).
    fn set_reserve(&self, asset: &str, supply: &str, borrow: &str) {
        let args = [
            "aave-set-reserve",
            &self.address,
            asset,
            supply,
            borrow,
            A_TOKEN,
        ];
        let answer = Self::run(self.stack, self.chain, &args);
        assert!(answer.get("error").is_none(), "{answer}");
    }
}

async fn rig(lido: &Lido, env: &[(&str, &str)]) -> ChainRig {
    let mut all = vec![("FACTOMAT_LIDO_API_URL", lido.url.as_str())];
    all.extend_from_slice(env);
    // Each test sets the reserves of pools at fixed addresses: a stack of its own.
    ChainRig::with_own_stack(DevStack::start_with_mainnet(), &all).await
}

fn venue_ids(body: &Value) -> Vec<String> {
    body["venues"]
        .as_array()
        .expect("venues")
        .iter()
        .map(|v| v["venue_id"].as_str().expect("id").to_string())
        .collect()
}

fn checksum(address: &str) -> String {
    address
        .parse::<alloy::primitives::Address>()
        .expect("address")
        .to_checksum(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_rates_and_the_lido_sma_are_stated_exactly_then_served_from_the_cache() {
    let lido = Lido::start(sma(3.0125)).await;
    let rig = rig(&lido, &[]).await;
    let pool = AavePool::place(&rig.stack, 1);
    pool.set_reserve(
        WETH_1,
        "48213456789012345678901234",
        "61734000000000000000000000",
    );
    let before = rig.server.outbound();
    // The V1 form: chain_id + native asset only.
    let body = rig.pay(VM04, &json!({"chain_id": 1, "asset": {"kind": "native"}}));
    assert_output_valid("VM04", &body);
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(body["classification"], "OBSERVED_COMPLETE");
    assert_eq!(body["protocol_set_version"], "aave_v3-lido-2026-04");
    assert_eq!(
        body["request"],
        json!({"chain_id": 1, "asset": {"kind": "native"}, "venue_types": null,
        "protocols": null, "sort": "protocol", "limit": 20})
    );
    assert_eq!(
        body["asset"],
        json!({"kind": "native", "address": null, "symbol": null})
    );
    assert_eq!(
        body["resolved"],
        json!({"chain_id": 1, "asset": {"kind": "native", "address": null}, "symbol": "ETH"})
    );
    assert_eq!(
        body["sort"],
        json!({"order": "asc", "field": "protocol", "label": "objective_sort_not_a_recommendation"})
    );
    assert_eq!(venue_ids(&body), ["aave_v3:1:WETH", "lido:1:stETH"]);
    assert_eq!(
        (body["result_count"].clone(), body["truncated"].clone()),
        (json!(2), json!(false))
    );
    assert_eq!(body["cached"], false);
    assert_eq!(body["observation_age_ms"], 0);
    let aave = &body["venues"][0];
    assert_eq!(
        aave["primary_apr"], "0.048213456789012345678901234",
        "ray / 1e27 to the last digit"
    );
    assert_eq!(aave["primary_rate_basis"], "APR");
    assert_eq!(aave["unit"], "decimal_fraction");
    assert_eq!(
        aave["secondary_rates"],
        json!([{"name": "variable_borrow_apr", "apr": "0.061734", "basis": "APR"}])
    );
    assert_eq!(aave["asset"], json!({"symbol": "WETH", "address": WETH_1}));
    assert_eq!(
        aave["contracts"],
        json!({"pool": pool.address, "pool_addresses_provider": PROVIDER_1, "a_token": checksum(A_TOKEN)})
    );
    assert_eq!(
        aave["source"],
        "Pool.getReserveData currentLiquidityRate / 1e27"
    );
    assert_eq!(aave["block_number"], body["block_number"]);
    assert_eq!(aave["evidence_ids"], json!(["ev-aave-1-weth"]));
    let steth = &body["venues"][1];
    assert_eq!(steth["primary_apr"], "0.030125", "percent 3.0125 / 100");
    assert_eq!(
        steth["secondary_rates"],
        json!([{"name": "latest_daily_apr_in_sma_window", "apr": "0.0295", "basis": "APR"}])
    );
    assert_eq!(steth["block_number"], Value::Null);
    assert_eq!(steth["venue_type"], "liquid_staking");
    assert_eq!(steth["evidence_ids"], json!(["ev-lido-sma"]));
    let evidence_ids: Vec<&str> = body["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert_eq!(evidence_ids, ["ev-aave-1-weth", "ev-lido-sma"]);
    assert_eq!(body["errors"], json!([]));
    let text = body["limitations"].to_string();
    assert!(
        text.contains("never converted to APY")
            && text.contains("WETH gateway")
            && text.contains("7-day simple moving average"),
        "{text}"
    );
    // verify + eth_blockNumber + getPool + getReserveData + Lido GET + settle.
    assert_eq!(rig.server.outbound() - before, 6);
    assert_eq!(lido.hits(), 1);

    // Within the TTL the same observations are served from the cache: no provider is read.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let before = rig.server.outbound();
    let body = rig.pay(VM04, &json!({"chain_id": 1, "asset": {"kind": "symbol", "symbol": "ETH"}, "sort": "rate_desc", "limit": 1}));
    assert_output_valid("VM04", &body);
    assert_eq!(rig.server.outbound() - before, 2, "verify + settle only");
    assert_eq!(lido.hits(), 1);
    assert_eq!(body["cached"], true);
    assert!(
        body["observation_age_ms"]
            .as_u64()
            .is_some_and(|age| (30..60_000).contains(&age)),
        "{}",
        body["observation_age_ms"]
    );
    assert_eq!(venue_ids(&body), ["aave_v3:1:WETH"]);
    assert_eq!(body["truncated"], true);
    assert!(
        body["omissions"]
            .to_string()
            .contains("lido:1:stETH omitted by limit 1.")
    );
    assert_eq!(body["sort"]["field"], "primary_apr");
    assert!(body["limitations"].to_string().contains("in-process cache"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v2_form_filters_sorts_and_resolves_addresses_on_base() {
    let lido = Lido::start(sma(2.9876)).await;
    let rig = rig(&lido, &[]).await;
    let pool = AavePool::place(&rig.stack, 8453);
    pool.set_reserve(
        USDC_8453,
        "48213000000000000000000000",
        "61734000000000000000000000",
    );
    pool.set_reserve(
        WSTETH_8453,
        "1000000000000000000000",
        "2500000000000000000000000",
    );

    let body = rig.pay(VM04, &json!({"chain_id": 8453, "asset": {"kind": "symbol", "symbol": "USDC"}, "sort": "rate_desc", "limit": 5}));
    assert_output_valid("VM04", &body);
    assert_eq!(body["classification"], "OBSERVED_COMPLETE", "{body:#}");
    assert_eq!(venue_ids(&body), ["aave_v3:8453:USDC"]);
    assert_eq!(body["venues"][0]["primary_apr"], "0.048213");
    assert_eq!(
        body["resolved"],
        json!({"chain_id": 8453, "asset": {"kind": "erc20", "address": USDC_8453}, "symbol": "USDC"})
    );
    assert_eq!(
        body["omissions"],
        json!(["lido has no venue for USDC on chain 8453 in the frozen set."])
    );
    assert_eq!(lido.hits(), 0, "no candidate needed the Lido API");

    // An ERC-20 given by (lowercase) address resolves to its symbol: bridged wstETH has both venues.
    let body = rig.pay(VM04, &json!({"chain_id": 8453, "asset": {"kind": "erc20", "address": WSTETH_8453.to_lowercase()}, "sort": "rate_asc"}));
    assert_output_valid("VM04", &body);
    assert_eq!(body["classification"], "OBSERVED_COMPLETE", "{body:#}");
    assert_eq!(body["resolved"]["symbol"], "wstETH");
    assert_eq!(
        venue_ids(&body),
        ["aave_v3:8453:wstETH", "lido:8453:wstETH"],
        "0.000001 before 0.029876"
    );
    assert_eq!(body["venues"][0]["primary_apr"], "0.000001");
    assert_eq!(body["venues"][1]["primary_apr"], "0.029876");
    assert_eq!(
        body["venues"][1]["contracts"],
        json!({"wsteth_bridged": WSTETH_8453})
    );
    assert!(
        body["limitations"]
            .to_string()
            .contains("bridged and non-rebasing")
    );

    // Filters apply before sort and limit; everything filtered out is an empty supported set.
    let before = rig.server.outbound();
    let body = rig.pay(VM04, &json!({"chain_id": 8453, "asset": {"kind": "symbol", "symbol": "wstETH"}, "venue_types": ["liquid_staking"], "protocols": ["aave_v3"]}));
    assert_output_valid("VM04", &body);
    assert_eq!(
        body["classification"], "OBSERVED_EMPTY_SUPPORTED_SET",
        "{body:#}"
    );
    assert_eq!(body["status"], "OK");
    assert_eq!(body["venues"], json!([]));
    assert_eq!(body["block_number"], Value::Null);
    let omissions = body["omissions"].to_string();
    assert!(
        omissions.contains("aave_v3:8453:wstETH excluded by the venue_types filter.")
            && omissions.contains("lido:8453:wstETH excluded by the protocols filter."),
        "{omissions}"
    );
    assert_eq!(
        rig.server.outbound() - before,
        2,
        "no provider read for an empty set"
    );

    let unknown = "0x00000000000000000000000000000000000beef1";
    let body = rig.pay(
        VM04,
        &json!({"chain_id": 8453, "asset": {"kind": "erc20", "address": unknown}}),
    );
    assert_output_valid("VM04", &body);
    assert_eq!(body["classification"], "OBSERVED_EMPTY_SUPPORTED_SET");
    assert_eq!(
        body["resolved"],
        json!({"chain_id": 8453, "asset": {"kind": "erc20", "address": checksum(unknown)}, "symbol": null})
    );
    assert!(
        body["omissions"][0]
            .as_str()
            .is_some_and(|o| o.contains("is not an asset of the frozen venue set"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_and_refusals_reach_every_hold_and_partial_class() {
    let lido = Lido::start(LidoMode::Status(429)).await;
    let rig = rig(&lido, &[]).await;
    let pool = AavePool::place(&rig.stack, 1);
    pool.set_reserve(
        WETH_1,
        "20000000000000000000000000",
        "30000000000000000000000000",
    );
    pool.set_reserve(WSTETH_1, "50000000000000000000000000000", "1");

    // Aave observed, Lido rate-limited: partial; the null rate sorts last under rate_desc.
    let body = rig.pay(
        VM04,
        &json!({"chain_id": 1, "asset": {"kind": "native"}, "sort": "rate_desc"}),
    );
    assert_output_valid("VM04", &body);
    assert_eq!(
        (body["status"].clone(), body["classification"].clone()),
        (json!("PARTIAL"), json!("OBSERVED_PARTIAL")),
        "{body:#}"
    );
    assert_eq!(venue_ids(&body), ["aave_v3:1:WETH", "lido:1:stETH"]);
    assert_eq!(body["venues"][1]["primary_apr"], Value::Null);
    // The failed venue says when its read was attempted and that it failed; it has no
    // observed_at. The observed one has both times.
    let failed = &body["venues"][1];
    assert_eq!(failed["observed_at"], Value::Null, "{failed:#}");
    assert_eq!(failed["read_failed"], true);
    assert!(failed["attempted_at"].is_string(), "{failed:#}");
    let observed = &body["venues"][0];
    assert_eq!(observed["read_failed"], false);
    assert!(observed["observed_at"].is_string(), "{observed:#}");
    assert_eq!(body["retrieved_at"], observed["observed_at"]);
    assert_eq!(
        body["errors"],
        json!([{"source": "lido:1:stETH", "code": "upstream_rate_limited",
        "message": "Lido API: the provider rate-limited the request (HTTP 429)"}])
    );

    // Lido only, still failing: nothing observed because of the upstream.
    let body = rig.pay(
        VM04,
        &json!({"chain_id": 1, "asset": {"kind": "symbol", "symbol": "stETH"}}),
    );
    assert_output_valid("VM04", &body);
    assert_eq!(
        (body["status"].clone(), body["classification"].clone()),
        (json!("HOLD"), json!("HOLD_UPSTREAM")),
        "{body:#}"
    );
    // Nothing was read: no retrieved_at of an observation, and a limitation says so.
    assert_eq!(body["retrieved_at"], Value::Null, "{body:#}");
    assert_eq!(body["venues"][0]["observed_at"], Value::Null);
    assert!(
        body["limitations"]
            .as_array()
            .expect("limitations")
            .iter()
            .any(|l| l
                .as_str()
                .is_some_and(|l| l.contains("retrieved_at is null"))),
        "{body:#}"
    );

    lido.set(LidoMode::Malformed);
    let body = rig.pay(
        VM04,
        &json!({"chain_id": 1, "asset": {"kind": "symbol", "symbol": "stETH"}}),
    );
    assert_eq!(body["classification"], "HOLD_UPSTREAM");
    assert_eq!(body["errors"][0]["code"], "upstream_malformed", "{body:#}");

    // wstETH: the Aave reserve reports 5000% (refused); Lido says 9999% (refused too).
    lido.set(sma(99_999.0));
    let body = rig.pay(VM04, &json!({"chain_id": 1, "asset": {"kind": "symbol", "symbol": "wstETH"}, "sort": "rate_asc"}));
    assert_output_valid("VM04", &body);
    assert_eq!(
        (body["status"].clone(), body["classification"].clone()),
        (json!("HOLD"), json!("HOLD_OUTPUT_REFUSED")),
        "{body:#}"
    );
    assert!(
        body["venues"]
            .as_array()
            .expect("venues")
            .iter()
            .all(|v| v["primary_apr"].is_null())
    );
    let codes: Vec<&str> = body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["code"].as_str())
        .collect();
    assert_eq!(
        codes,
        ["rate_refused_implausible", "rate_refused_implausible"]
    );
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the observed APR 50 exceeds the plausibility ceiling 10")),
        "{body:#}"
    );

    // A reserve the Pool does not list is an upstream gap, not a zero rate.
    let body = rig.pay(
        VM04,
        &json!({"chain_id": 1, "asset": {"kind": "symbol", "symbol": "USDC"}}),
    );
    assert_output_valid("VM04", &body);
    assert_eq!(body["classification"], "HOLD_UPSTREAM", "{body:#}");
    assert_eq!(body["errors"][0]["code"], "reserve_not_listed");
    assert!(body["errors"][0]["message"].as_str().is_some_and(|m| {
        m.contains("lists no reserve for 0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48")
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_lido_api_and_a_dead_rpc_node_are_bounded_and_truthful() {
    let lido = Lido::start(LidoMode::Hang).await;
    let closed = closed_port();
    let dead = format!("http://{}/?key=SECRETKEY-vm04", closed.addr);
    let rig = rig(&lido, &[("FACTOMAT_RPC_URL_EIP155_1", dead.as_str())]).await;
    let started = std::time::Instant::now();
    let body = rig.pay(VM04, &json!({"chain_id": 1, "asset": {"kind": "native"}}));
    let elapsed = started.elapsed();
    assert_output_valid("VM04", &body);
    assert_eq!(body["classification"], "HOLD_UPSTREAM", "{body:#}");
    let codes: Vec<&str> = body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["code"].as_str())
        .collect();
    assert_eq!(codes, ["upstream_unavailable", "upstream_timeout"]);
    assert!(
        body["errors"][1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("8000 ms"))
    );
    assert!(elapsed < std::time::Duration::from_secs(20), "{elapsed:?}");
    assert!(!format!("{body}\n{}", common::logs::logs()).contains("SECRETKEY"));
    assert_eq!(body["evidence"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_lido_api_url_is_503_before_any_charge() {
    let rig = ChainRig::start(&[]).await;
    let before = rig.buyer_balance();
    let answer = rig.pay_unchecked(VM04, &json!({"chain_id": 1, "asset": {"kind": "native"}}));
    assert_eq!(answer["status"], 503, "{answer}");
    assert_eq!(answer["body"]["error"]["code"], "provider_not_configured");
    assert!(
        answer["body"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Lido API"))
    );
    assert_eq!(rig.buyer_balance(), before);
}

#[tokio::test]
async fn without_a_capture_the_free_sample_is_labelled_illustrative() {
    let server = common::TestServer::start().await;
    let response = server.get("/samples/productive-venue-snapshot").await;
    assert_eq!(response.status().as_u16(), 200);
    let sample: Value = response.json().await.expect("json");
    assert_eq!(sample["sample"], true);
    assert_eq!(sample["kind"], "illustrative");
    assert_eq!(sample["not_a_current_observation"], true);
    let notice = sample["notice"].as_str().expect("notice");
    assert!(
        notice.contains("not captured") && !notice.starts_with("Captured"),
        "{notice}"
    );
    assert!(sample.get("captured_at").is_none());
    assert_output_valid("VM04", &sample["response"]);
    assert_eq!(server.outbound(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_capture_stores_a_real_answer_that_the_free_endpoint_then_serves() {
    let lido = Lido::start(sma(3.05)).await;
    let stack = DevStack::start_with_mainnet();
    AavePool::place(&stack, 8453).set_reserve(
        USDC_8453,
        "41200000000000000000000000",
        "55000000000000000000000000",
    );
    let sample_path = common::temp_path("captured-sample.json");
    let env = [
        ("FACTOMAT_RPC_URL_EIP155_8453", stack.field("rpc_url")),
        ("FACTOMAT_RPC_URL_EIP155_1", stack.field("rpc_url_eip155_1")),
        ("FACTOMAT_LIDO_API_URL", lido.url.clone()),
        ("FACTOMAT_SAMPLE_PATH", sample_path.display().to_string()),
    ];
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_factomat"))
        .args(["sample", "capture"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("factomat runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stored: Value =
        serde_json::from_slice(&std::fs::read(&sample_path).expect("capture stored"))
            .expect("json");
    // The manifest's example request (USDC on Base) was really answered by the stand-ins.
    let block = stored["block_number"]
        .as_str()
        .expect("a block")
        .to_string();
    assert_eq!(stored["response"]["block_number"], block);
    assert_eq!(
        stored["response"]["venues"][0]["primary_apr"], "0.0412",
        "{stored:#}"
    );
    assert!(stdout.contains(&format!("block {block}")), "{stdout}");

    let hits = lido.hits();
    let server = common::TestServer::with_env(
        &env.iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
    )
    .await;
    let sample: Value = server.get_json("/samples/productive-venue-snapshot").await;
    assert_eq!(sample["kind"], "captured", "{sample:#}");
    assert_eq!(sample["not_a_current_observation"], true);
    assert_eq!(sample["captured_at"], stored["captured_at"]);
    assert_eq!(sample["block_number"], block);
    assert_eq!(sample["response"], stored["response"]);
    assert!(
        sample["notice"]
            .as_str()
            .is_some_and(|n| n.starts_with("Captured sample: a real VM04 answer")),
        "{sample:#}"
    );
    assert_output_valid("VM04", &sample["response"]);
    assert_eq!(
        server.outbound(),
        0,
        "serving the capture does no provider work"
    );
    assert_eq!(lido.hits(), hits);

    // A capture from another methodology is not served as this one's sample.
    let mut foreign = stored.clone();
    foreign["methodology_version"] = json!("productive-venue-0.1.0");
    std::fs::write(&sample_path, foreign.to_string()).expect("write");
    let server = common::TestServer::with_env(&[(
        "FACTOMAT_SAMPLE_PATH",
        sample_path.display().to_string().as_str(),
    )])
    .await;
    let sample: Value = server.get_json("/samples/productive-venue-snapshot").await;
    assert_eq!(sample["kind"], "illustrative");
}
