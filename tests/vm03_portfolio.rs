//! VM03 portfolio preflight, paid through the official client on the dev stack: real ERC-20s
//! on both anvils, a loopback inventory provider speaking `alchemy_getTokenBalances` with
//! pageKey pagination, and a loopback DexScreener `/tokens/v1/{chain}/{addresses}` API.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::closed_port;
use common::devstack::DevStack;
use common::logs::logs;
use common::onchain::{ChainRig, assert_output_valid, serve};
use serde_json::{Value, json};
use warp::Filter;

const VM03: &str = "/v1/portfolio-preflight";
const WETH_BASE: &str = "0x4200000000000000000000000000000000000006";

// ---------------------------------------------------------------- loopback inventory provider

#[derive(Clone)]
enum Page {
    Entries(Vec<Value>),
    Status(u16),
    Malformed,
    Hang,
    /// A well-formed last page of zero balances whose answer takes at least this many bytes.
    Oversized(usize),
}

#[derive(Clone, Default)]
struct Inventory {
    /// chain tag ("base", "ethereum") → pages
    pages: Arc<Mutex<HashMap<String, Vec<Page>>>>,
    /// (chain tag, params) of every request
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    base: String,
}

fn balance_entry(token: &str, raw: u128) -> Value {
    json!({"contractAddress": token.to_lowercase(), "tokenBalance": format!("0x{raw:064x}"), "error": null})
}

impl Inventory {
    async fn start() -> Inventory {
        let mut inventory = Inventory::default();
        let (pages, seen) = (inventory.pages.clone(), inventory.seen.clone());
        let route = warp::path::param::<String>()
            .and(warp::post())
            .and(warp::body::json())
            .then(move |tag: String, request: Value| {
                let (pages, seen) = (pages.clone(), seen.clone());
                async move { answer(&pages, &seen, tag, request).await }
            });
        inventory.base = format!("http://{}", serve(route).await);
        inventory
    }

    /// The configured URL of a chain, carrying a key like a real provider URL.
    fn url(&self, tag: &str) -> String {
        format!("{}/{tag}?apikey=SECRETKEY-inventory-{tag}", self.base)
    }

    fn set(&self, tag: &str, pages: Vec<Page>) {
        self.pages
            .lock()
            .expect("pages")
            .insert(tag.to_string(), pages);
    }

    fn requests(&self, tag: &str) -> Vec<Value> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

async fn answer(
    pages: &Mutex<HashMap<String, Vec<Page>>>,
    seen: &Mutex<Vec<(String, Value)>>,
    tag: String,
    request: Value,
) -> http::Response<String> {
    let reply = |status: u16, body: String| {
        http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(body)
            .expect("response")
    };
    let id = request["id"].clone();
    if request["method"] != "alchemy_getTokenBalances" || request["params"][1] != "erc20" {
        return reply(200, json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Unsupported method"}}).to_string());
    }
    seen.lock()
        .expect("seen")
        .push((tag.clone(), request["params"].clone()));
    let index: usize = request["params"][2]["pageKey"]
        .as_str()
        .and_then(|k| k.strip_prefix("page-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let list = pages
        .lock()
        .expect("pages")
        .get(&tag)
        .cloned()
        .unwrap_or_default();
    match list
        .get(index)
        .cloned()
        .unwrap_or(Page::Entries(Vec::new()))
    {
        Page::Entries(entries) => {
            let mut result = json!({"address": request["params"][0], "tokenBalances": entries});
            if index + 1 < list.len() {
                result["pageKey"] = json!(format!("page-{}", index + 1));
            }
            reply(
                200,
                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
            )
        }
        Page::Status(code) => reply(
            code,
            json!({"error": {"code": code, "message": "Too many requests"}}).to_string(),
        ),
        Page::Malformed => reply(200, "{\"jsonrpc\":\"2.0\",\"id\":".to_string()),
        Page::Oversized(bytes) => {
            let zero = |i: usize| json!({"contractAddress": format!("0x{i:040x}"), "tokenBalance": format!("0x{:064x}", 0), "error": null});
            let size = zero(0).to_string().len() + 1;
            let entries: Vec<Value> = (1..=bytes / size + 1).map(zero).collect();
            let result = json!({"address": request["params"][0], "tokenBalances": entries});
            reply(
                200,
                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
            )
        }
        Page::Hang => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            reply(200, String::new())
        }
    }
}

// ---------------------------------------------------------------- loopback DexScreener

#[derive(Clone)]
enum DexMode {
    Pairs,
    Status(u16),
    Malformed,
    Hang,
}

#[derive(Clone)]
struct Dex {
    /// lowercase token → pairs that mention it (as base or quote)
    pairs: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    mode: Arc<Mutex<DexMode>>,
    /// (chain, number of addresses) of every request
    batches: Arc<Mutex<Vec<(String, usize)>>>,
    url: String,
}

fn pair(chain: &str, base: &str, quote: &str, price: &str, liquidity: f64, id: &str) -> Value {
    let address = format!("0x{id:0>40}");
    json!({
        "chainId": chain, "dexId": "uniswap", "url": format!("https://dexscreener.com/{chain}/{address}"),
        "pairAddress": address, "labels": ["v3"],
        "baseToken": {"address": base, "name": "Base", "symbol": "BASE"},
        "quoteToken": {"address": quote, "name": "Quote", "symbol": "QUOTE"},
        "priceNative": "0.0001", "priceUsd": price,
        "txns": {"h24": {"buys": 10, "sells": 12}},
        "volume": {"h24": 88400000.5, "h6": 1000.0, "h1": 10.0, "m5": 0.0},
        "priceChange": {"h24": -1.2},
        "liquidity": {"usd": liquidity, "base": 1000, "quote": 2000},
        "fdv": 1000000, "marketCap": 1000000,
        "pairCreatedAt": 1691582400000i64
    })
}

impl Dex {
    async fn start() -> Dex {
        let dex = Dex {
            pairs: Arc::default(),
            mode: Arc::new(Mutex::new(DexMode::Pairs)),
            batches: Arc::default(),
            url: String::new(),
        };
        let (pairs, mode, batches) = (dex.pairs.clone(), dex.mode.clone(), dex.batches.clone());
        let route = warp::path!("tokens" / "v1" / String / String)
            .and(warp::get())
            .then(move |chain: String, list: String| {
                let (pairs, mode, batches) = (pairs.clone(), mode.clone(), batches.clone());
                async move {
                    let addresses: Vec<String> = list.split(',').map(str::to_lowercase).collect();
                    batches
                        .lock()
                        .expect("batches")
                        .push((chain.clone(), addresses.len()));
                    let reply = |status: u16, body: String| {
                        http::Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(body)
                            .expect("response")
                    };
                    let current = mode.lock().expect("mode").clone();
                    match current {
                        DexMode::Status(code) => reply(code, "{\"error\":\"rate limited\"}".into()),
                        DexMode::Malformed => reply(200, "[{\"chainId\":".into()),
                        DexMode::Hang => {
                            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                            reply(200, String::new())
                        }
                        DexMode::Pairs => {
                            let known = pairs.lock().expect("pairs");
                            let mut out: Vec<Value> = Vec::new();
                            for address in &addresses {
                                for p in known.get(address).into_iter().flatten() {
                                    if p["chainId"] == chain.as_str()
                                        && !out.iter().any(|o| o["pairAddress"] == p["pairAddress"])
                                    {
                                        out.push(p.clone());
                                    }
                                }
                            }
                            reply(200, Value::Array(out).to_string())
                        }
                    }
                }
            });
        let url = format!("http://{}", serve(route).await);
        Dex { url, ..dex }
    }

    fn add(&self, pair: Value) {
        let mut pairs = self.pairs.lock().expect("pairs");
        for side in ["baseToken", "quoteToken"] {
            let token = pair[side]["address"]
                .as_str()
                .expect("token")
                .to_lowercase();
            pairs.entry(token).or_default().push(pair.clone());
        }
    }

    fn set(&self, mode: DexMode) {
        *self.mode.lock().expect("mode") = mode;
    }

    fn batches(&self) -> Vec<(String, usize)> {
        self.batches.lock().expect("batches").clone()
    }
}

// ---------------------------------------------------------------- rig

struct Portfolio {
    rig: ChainRig,
    inventory: Inventory,
    dex: Dex,
}

async fn portfolio(env: &[(&str, &str)]) -> Portfolio {
    let inventory = Inventory::start().await;
    let dex = Dex::start().await;
    let (eth, base) = (inventory.url("ethereum"), inventory.url("base"));
    let mut all = vec![
        ("FACTOMAT_INVENTORY_URL_EIP155_1", eth.as_str()),
        ("FACTOMAT_INVENTORY_URL_EIP155_8453", base.as_str()),
        ("FACTOMAT_DEXSCREENER_URL", dex.url.as_str()),
    ];
    all.extend_from_slice(env);
    let rig = ChainRig::start(&all).await;
    Portfolio {
        rig,
        inventory,
        dex,
    }
}

fn deploy(stack: &DevStack, symbol: &str, decimals: &str, holder: &str, amount: &str) -> String {
    let token = stack.deploy_erc20(&format!("{symbol} Token"), symbol, decimals);
    if amount != "0" {
        stack.chain(&["mint", holder, amount, "--token", &token]);
    }
    token
}

/// The token addresses a `deploy-erc20-many` run printed.
fn deployed_tokens(deployed: &Value) -> Vec<String> {
    deployed["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_str().expect("t").to_string())
        .collect()
}

fn fresh_address(n: u8) -> String {
    format!("0x5a0b{:036x}", 0x1000 + u128::from(n))
}

fn holding<'a>(body: &'a Value, token: &str) -> &'a Value {
    body["holdings"]
        .as_array()
        .expect("holdings")
        .iter()
        .find(|h| {
            h["token"]
                .as_str()
                .is_some_and(|t| t.eq_ignore_ascii_case(token))
        })
        .unwrap_or_else(|| panic!("no holding {token}"))
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

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holdings_are_read_at_one_block_priced_from_the_deepest_base_pair_and_valued_exactly() {
    let p = portfolio(&[]).await;
    let stack = &p.rig.stack;
    let owner = fresh_address(1);
    let big = deploy(stack, "BIG", "18", &owner, "123456789000000000000000000");
    let usd6 = deploy(stack, "USDX", "6", &owner, "303400000");
    let nomkt = deploy(stack, "NOMKT", "18", &owner, "1000000000000000000000");
    let tiny = deploy(stack, "TINY", "18", &owner, "5000000000000000000");
    let quote_only = deploy(stack, "QONLY", "18", &owner, "7000000000000000000");
    let ghost = deploy(stack, "GHOST", "18", &owner, "0");
    stack.chain(&["set-eth", &owner, "500000000000000000"]);
    p.inventory.set(
        "base",
        vec![
            Page::Entries(vec![
                balance_entry(&big, 123456789000000000000000000),
                balance_entry("0x00000000000000000000000000000000000dead1", 0),
            ]),
            Page::Entries(Vec::new()),
            Page::Entries(vec![
                balance_entry(&usd6, 303400000),
                balance_entry(&nomkt, 1000000000000000000000),
                balance_entry(&tiny, 5000000000000000000),
                balance_entry(&quote_only, 7000000000000000000),
                balance_entry(&big, 1),
            ]),
        ],
    );
    let other = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
    p.dex
        .add(pair("base", WETH_BASE, other, "3000.02", 41250000.0, "a1"));
    p.dex
        .add(pair("base", WETH_BASE, other, "2950", 20000.0, "a2"));
    p.dex
        .add(pair("base", &big, WETH_BASE, "0.00001234", 50000.0, "b1"));
    p.dex.add(pair("base", other, &big, "9", 90000000.0, "b2"));
    p.dex
        .add(pair("ethereum", &big, other, "5", 99000000.0, "b3"));
    p.dex
        .add(pair("base", &usd6, WETH_BASE, "1.00", 12900000.0, "c1"));
    p.dex
        .add(pair("base", &tiny, WETH_BASE, "99999", 500.0, "d1"));
    // QONLY is only ever a quote token, in a pool under the liquidity floor.
    p.dex
        .add(pair("base", other, &quote_only, "3000", 5000.0, "e1"));
    let before = p.rig.server.outbound();
    let body = p.rig.pay(
        VM03,
        &json!({
            "address": owner,
            "chains": ["eip155:8453"],
            "declared_holdings": [
                {"chain": "eip155:8453", "token": nomkt, "quantity_raw": "999000000000000000000"},
                {"chain": "eip155:8453", "token": ghost, "quantity_raw": "5"}
            ]
        }),
    );
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "OK", "{body:#}");
    // verify + eth_blockNumber + eth_getBalance + 3 inventory pages + 1 Multicall3 + 1 DEX batch + settle
    assert_eq!(p.rig.server.outbound() - before, 9);
    assert_eq!(
        body["chain_results"],
        json!([{"chain": "eip155:8453", "inventory_status": "COMPLETE",
        "block_number_observed": body["chain_results"][0]["block_number_observed"], "inventory_complete": true,
        "provider_response_complete": true, "discovery_capped": false, "pages_read": 3}])
    );
    let block = body["chain_results"][0]["block_number_observed"]
        .as_str()
        .expect("block");
    let pages = p.inventory.requests("base");
    assert_eq!(pages.len(), 3);
    assert_eq!(pages[0], json!([owner, "erc20"]));
    assert_eq!(pages[2][2], json!({"pageKey": "page-2"}));
    let order: Vec<&str> = body["holdings"]
        .as_array()
        .expect("holdings")
        .iter()
        .map(|h| h["symbol"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        order,
        ["ETH", "NOMKT", "GHOST", "BIG", "USDX", "TINY", "QONLY"],
        "native, declared, discovered"
    );

    let native = &body["holdings"][0];
    assert_eq!(
        (native["asset_kind"].clone(), native["token"].clone()),
        (json!("native"), Value::Null)
    );
    assert_eq!(
        (
            native["balance_raw"].clone(),
            native["balance_adjusted"].clone()
        ),
        (json!("500000000000000000"), json!("0.5"))
    );
    assert_eq!(native["price_usd"], "3000.02", "the deeper WETH pair");
    assert_eq!(native["priced_usd"], "1500.01");
    assert_eq!(native["liquidity_usd"], "41250000.00");
    assert_eq!(native["volume_h24_usd"], "88400000.50");
    assert_eq!(native["pair_created_at"], "2023-08-09T12:00:00Z");
    assert_eq!(native["observations"], json!(["PRICED_VIA_WRAPPED_NATIVE"]));
    assert_eq!(native["confidence"], "HIGH");
    assert_eq!(
        native["evidence_ids"],
        json!(["src-base-native", "src-base-dex"])
    );

    let big_holding = holding(&body, &big);
    assert_eq!(
        big_holding["balance_raw"], "123456789000000000000000000",
        "read at the block, not the inventory's duplicate"
    );
    assert_eq!(big_holding["balance_adjusted"], "123456789");
    assert_eq!(
        big_holding["price_usd"], "0.00001234",
        "base-token pair only, on this chain"
    );
    assert_eq!(big_holding["priced_usd"], "1523.46");
    assert_eq!(big_holding["pair_address"], format!("0x{:0>40}", "b1"));
    assert_eq!(
        big_holding["evidence_ids"],
        json!(["src-base-inventory", "src-base-metadata", "src-base-dex"])
    );
    assert_eq!(holding(&body, &usd6)["priced_usd"], "303.40");
    assert_eq!(holding(&body, &usd6)["decimals"], 6);
    let tiny_holding = holding(&body, &tiny);
    assert_eq!(tiny_holding["observations"], json!(["LOW_DEX_LIQUIDITY"]));
    assert_eq!(
        (
            tiny_holding["price_usd"].clone(),
            tiny_holding["priced_usd"].clone()
        ),
        (Value::Null, Value::Null)
    );
    assert_eq!(tiny_holding["liquidity_usd"], "500.00");
    assert_eq!(tiny_holding["confidence"], "MEDIUM");
    let qonly = holding(&body, &quote_only);
    assert_eq!(
        qonly["observations"],
        json!(["LOW_DEX_LIQUIDITY"]),
        "the quote-side pair is found, and the floor applies to it"
    );
    assert_eq!(qonly["pair_side"], "quote");
    assert_eq!(qonly["price_usd"], Value::Null);
    assert_eq!(
        big_holding["pair_side"], "base",
        "a base pair wins over a deeper quote-side one"
    );
    assert_eq!(
        holding(&body, &nomkt)["observations"],
        json!([
            "DECLARED_HOLDING",
            "DECLARED_QUANTITY_DIFFERS",
            "NO_DEX_MARKET"
        ])
    );
    let ghost_holding = holding(&body, &ghost);
    assert_eq!(
        ghost_holding["observations"],
        json!([
            "DECLARED_HOLDING",
            "DECLARED_NOT_IN_INVENTORY",
            "DECLARED_NOT_OBSERVED",
            "NO_DEX_MARKET"
        ])
    );
    assert_eq!(ghost_holding["balance_raw"], "0");
    assert_eq!(
        ghost_holding["evidence_ids"],
        json!(["src-base-metadata", "src-base-dex"])
    );
    for (token, expected) in [(&big, "123456789000000000000000000"), (&usd6, "303400000")] {
        let onchain = stack.chain(&["balance", token, &owner])["balance"].clone();
        assert_eq!(onchain, json!(expected));
    }

    assert_eq!(
        body["valuation"],
        json!({"quote_basis": "PARTIAL_DEX_QUOTED_COMPOSITION", "priced_usd": "3326.87",
        "priced_holding_count": 3, "unpriced_holding_count": 4, "as_of": body["valuation"]["as_of"]})
    );
    assert_eq!(
        body["concentration"],
        json!({"concentrated": true, "basis": "PRICED_HOLDINGS_ONLY", "threshold": "0.40",
        "largest_priced_share": "0.4579",
        "largest_priced_holding": {"chain": "eip155:8453", "token": big_holding["token"], "symbol": "BIG", "priced_usd": "1523.46"}})
    );
    assert_eq!(
        (
            body["returned_holding_count"].clone(),
            body["overflow_holding_count"].clone(),
            body["overflow_count_complete"].clone()
        ),
        (json!(7), json!(0), json!(true))
    );
    assert_eq!(body["confidence"], "MEDIUM");
    let readiness = &body["readiness"];
    assert_eq!(readiness["status"], "PARTIAL");
    assert_eq!(readiness["evidence_sufficient_for_reasoning"], true);
    assert_eq!(
        readiness["pricing_coverage"],
        json!({"priced_holding_count": 3, "unpriced_holding_count": 4, "priced_share_of_returned_holdings": "0.4286"})
    );
    assert_eq!(readiness["concentration_flag"], true);
    assert_eq!(
        readiness["factual_flags"],
        json!([
            "DECLARED_NOT_IN_INVENTORY",
            "DECLARED_NOT_OBSERVED",
            "DECLARED_QUANTITY_DIFFERS",
            "NO_DEX_MARKET",
            "LOW_DEX_LIQUIDITY"
        ])
    );
    assert_eq!(
        readiness["evidence_gaps"],
        json!(["INCOMPLETE_PRICING_COVERAGE", "UNPRICED_HOLDINGS"])
    );
    let ids: Vec<&str> = body["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "src-base-native",
            "src-base-inventory",
            "src-base-metadata",
            "src-base-dex"
        ]
    );
    assert_eq!(body["sources"][0]["block_number"], block);
    assert_eq!(body["sources"][0]["pagination_complete"], true);
    assert!(
        body["sources"][0]["limitations"]
            .to_string()
            .contains("is not paginated"),
        "the native source says its pagination flag is no pagination observation"
    );
    assert_eq!(
        body["sources"][2]["block_number"], block,
        "metadata at the same block"
    );
    assert_eq!(
        body["sources"][1]["block_number"],
        Value::Null,
        "the inventory is not block-pinned"
    );
    assert_eq!(p.dex.batches(), vec![("base".to_string(), 7)]);
    assert!(
        !format!("{body}\n{}", logs()).contains("SECRETKEY"),
        "an inventory key leaked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_five_holdings_are_capped_at_40_shared_fairly_between_chains() {
    let p = portfolio(&[]).await;
    let owner = fresh_address(2);
    let many = p.rig.stack.chain(&[
        "deploy-erc20-many",
        "55",
        "CAP",
        "18",
        "--mint-to",
        &owner,
        "--amount",
        "1000000000000000000",
    ]);
    let base_tokens = deployed_tokens(&many);
    let mainnet = p.rig.stack.chain_mainnet(&[
        "deploy-erc20-many",
        "3",
        "ONE",
        "6",
        "--mint-to",
        &owner,
        "--amount",
        "2500000",
    ]);
    let eth_tokens = deployed_tokens(&mainnet);
    let entries = |tokens: &[String], raw: u128| {
        tokens
            .iter()
            .map(|t| balance_entry(t, raw))
            .collect::<Vec<_>>()
    };
    p.inventory.set(
        "base",
        vec![
            Page::Entries(entries(&base_tokens[..30], 1000000000000000000)),
            Page::Entries(entries(&base_tokens[30..], 1000000000000000000)),
        ],
    );
    p.inventory.set(
        "ethereum",
        vec![Page::Entries(entries(&eth_tokens, 2500000))],
    );
    let body = p.rig.pay(VM03, &json!({"address": owner}));
    assert_output_valid("VM03", &body);
    assert_eq!(
        body["status"], "PARTIAL",
        "the cap is a truthful PARTIAL: {body:#}"
    );
    assert_eq!(body["requested_chains"], json!(["eip155:1", "eip155:8453"]));
    assert_eq!(body["returned_holding_count"], 40);
    assert_eq!(body["overflow_holding_count"], 18);
    assert_eq!(body["overflow_count_complete"], true);
    let chains: Vec<(Value, Value, Value, Value)> = body["chain_results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                r["chain"].clone(),
                r["inventory_status"].clone(),
                r["discovery_capped"].clone(),
                r["inventory_complete"].clone(),
            )
        })
        .collect();
    assert_eq!(
        chains,
        vec![
            (
                json!("eip155:1"),
                json!("COMPLETE"),
                json!(false),
                json!(true)
            ),
            (
                json!("eip155:8453"),
                json!("PARTIAL"),
                json!(true),
                json!(true)
            ),
        ]
    );
    let returned: Vec<String> = body["holdings"]
        .as_array()
        .expect("holdings")
        .iter()
        .map(|h| h["token"].as_str().expect("token").to_string())
        .collect();
    let mut expected: Vec<String> = eth_tokens.clone();
    expected.extend(base_tokens[..37].iter().cloned());
    assert_eq!(
        returned, expected,
        "chain 1 keeps its 3, Base fills the rest in provider order"
    );
    assert_eq!(holding(&body, &eth_tokens[0])["balance_adjusted"], "2.5");
    assert_eq!(
        body["readiness"]["factual_flags"],
        json!([
            "HOLDINGS_CAP_REACHED",
            "NO_DEX_MARKET",
            "CONCENTRATION_NOT_ASSESSABLE"
        ]),
        "nothing priced: concentrated false is flagged as not assessed"
    );
    assert_eq!(
        body["readiness"]["evidence_gaps"],
        json!([
            "HOLDINGS_OMITTED",
            "INCOMPLETE_PRICING_COVERAGE",
            "UNPRICED_HOLDINGS"
        ])
    );
    assert_eq!(
        body["readiness"]["evidence_sufficient_for_reasoning"],
        false
    );
    assert_eq!(body["readiness"]["inventory_complete"], true);
    assert_eq!(body["valuation"]["priced_usd"], Value::Null);
    assert_eq!(body["concentration"]["largest_priced_share"], Value::Null);
    assert_eq!(body["concentration"]["concentrated"], false);
    assert!(limitations(&body).contains("concentration could not be assessed"));
    assert!(
        limitations(&body)
            .contains("The 40-holding cap omitted 18 discovered holdings (eip155:8453: 18)."),
        "{}",
        limitations(&body)
    );
    let mut batches = p.dex.batches();
    batches.sort();
    assert_eq!(
        batches,
        vec![
            ("base".to_string(), 7),
            ("base".to_string(), 30),
            ("ethereum".to_string(), 3)
        ],
        "batched by 30"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_that_stops_mid_pagination_is_partial_and_says_what_is_missing() {
    let p = portfolio(&[]).await;
    let owner = fresh_address(3);
    let first = deploy(&p.rig.stack, "FIRST", "18", &owner, "1000");
    let second = deploy(&p.rig.stack, "SECOND", "18", &owner, "2000");
    let request = json!({"address": owner, "chains": ["eip155:8453"]});
    p.inventory.set(
        "base",
        vec![
            Page::Entries(vec![
                balance_entry(&first, 1000),
                balance_entry(&second, 2000),
            ]),
            Page::Status(429),
            Page::Entries(Vec::new()),
        ],
    );
    let body = p.rig.pay(VM03, &request);
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(body["chain_results"][0]["inventory_status"], "PARTIAL");
    assert_eq!(body["chain_results"][0]["pages_read"], 1);
    assert_eq!(
        body["chain_results"][0]["provider_response_complete"],
        false
    );
    assert_eq!(body["returned_holding_count"], 2);
    assert_eq!(body["overflow_count_complete"], false);
    assert_eq!(body["confidence"], "LOW");
    assert_eq!(body["sources"][1]["pagination_complete"], false);
    assert_eq!(
        body["readiness"]["evidence_gaps"][0],
        "INCOMPLETE_INVENTORY"
    );
    assert!(limitations(&body).contains("inventory page 2 could not be read (RPC HTTP status 429); holdings on it and on later pages are missing"), "{}", limitations(&body));

    p.inventory.set("base", vec![Page::Malformed]);
    let body = p.rig.pay(VM03, &request);
    assert_output_valid("VM03", &body);
    assert_eq!(
        (
            body["status"].clone(),
            body["chain_results"][0]["pages_read"].clone()
        ),
        (json!("PARTIAL"), json!(0))
    );
    assert!(
        limitations(&body)
            .contains("inventory page 1 could not be read (RPC answer was not valid JSON-RPC)")
    );

    let error_entry = json!({"contractAddress": second.to_lowercase(), "tokenBalance": null, "error": "execution reverted"});
    p.inventory.set(
        "base",
        vec![Page::Entries(vec![
            balance_entry(&first, 1000),
            error_entry,
        ])],
    );
    let body = p.rig.pay(VM03, &request);
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(
        body["chain_results"][0]["provider_response_complete"],
        false
    );
    assert!(
        limitations(&body)
            .contains("1 entries carried an error or an unreadable balance and were dropped")
    );

    p.inventory.set(
        "base",
        vec![Page::Entries(vec![balance_entry(&first, 1000)]), Page::Hang],
    );
    let started = std::time::Instant::now();
    let body = p.rig.pay(VM03, &request);
    let elapsed = started.elapsed();
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(body["returned_holding_count"], 1);
    assert!(
        limitations(&body)
            .contains("the inventory budget of 8000 ms ran out while page 2 was awaited"),
        "{}",
        limitations(&body)
    );
    assert!(
        elapsed >= std::time::Duration::from_millis(8000)
            && elapsed < std::time::Duration::from_secs(25),
        "{elapsed:?}"
    );
}

/// The manifest's `max_provider_response_bytes` (1 MiB) bounds an inventory answer, not the
/// RPC transport's larger cap: a 2 MiB page is a failed page, never read as a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_answer_over_the_manifest_size_limit_is_a_failed_page() {
    let limit = common::machine("VM03")["limits"]["max_provider_response_bytes"]
        .as_u64()
        .expect("limit");
    let p = portfolio(&[]).await;
    let owner = fresh_address(7);
    let first = deploy(&p.rig.stack, "SMALL", "18", &owner, "1000");
    p.inventory.set(
        "base",
        vec![
            Page::Entries(vec![balance_entry(&first, 1000)]),
            Page::Oversized(2 * 1024 * 1024),
        ],
    );
    let body = p
        .rig
        .pay(VM03, &json!({"address": owner, "chains": ["eip155:8453"]}));
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    let chain = &body["chain_results"][0];
    assert_eq!(chain["inventory_status"], "PARTIAL");
    assert_eq!(chain["pages_read"], 1);
    assert_eq!(chain["inventory_complete"], false);
    assert_eq!(chain["provider_response_complete"], false);
    assert_eq!(body["returned_holding_count"], 1);
    assert_eq!(body["confidence"], "LOW");
    let expected = format!(
        "inventory page 2 could not be read (the provider's answer exceeds {limit} bytes); holdings on it and on later pages are missing"
    );
    assert!(
        limitations(&body).contains(&expected),
        "{}",
        limitations(&body)
    );
}

/// A chain whose block cannot be read is HOLD, but the inventory pages read alongside are
/// still counted in `pages_read` (their holdings are not reported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_chain_reports_the_inventory_pages_it_read() {
    let closed = closed_port();
    let dead = format!("http://{}/v2/SECRETKEY-rpc", closed.addr);
    let p = portfolio(&[("FACTOMAT_RPC_URL_EIP155_1", dead.as_str())]).await;
    let owner = fresh_address(8);
    let listed = "0x00000000000000000000000000000000000000e1";
    p.inventory.set(
        "ethereum",
        vec![
            Page::Entries(vec![balance_entry(listed, 5)]),
            Page::Entries(Vec::new()),
        ],
    );
    let body = p
        .rig
        .pay(VM03, &json!({"address": owner, "chains": ["eip155:1"]}));
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "HOLD", "{body:#}");
    assert_eq!(body["chain_results"][0]["inventory_status"], "HOLD");
    assert_eq!(body["chain_results"][0]["pages_read"], 2, "{body:#}");
    assert_eq!(p.inventory.requests("ethereum").len(), 2);
    assert_eq!(body["holdings"], json!([]));
    assert_eq!(body["chain_results"][0]["inventory_complete"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pricing_failures_leave_holdings_unpriced_never_guessed() {
    let p = portfolio(&[]).await;
    let owner = fresh_address(4);
    let token = deploy(&p.rig.stack, "PRC", "18", &owner, "3000000000000000000");
    p.rig
        .stack
        .chain(&["set-eth", &owner, "1000000000000000000"]);
    p.inventory.set(
        "base",
        vec![Page::Entries(vec![balance_entry(
            &token,
            3000000000000000000,
        )])],
    );
    let mut prc_weth = pair("base", &token, WETH_BASE, "2", 100000.0, "f1");
    prc_weth["priceNative"] = json!("0.001");
    p.dex.add(prc_weth);
    let request = json!({"address": owner, "chains": ["eip155:8453"]});
    for (mode, needle) in [
        (
            DexMode::Status(429),
            "the provider rate-limited the request (HTTP 429)",
        ),
        (
            DexMode::Malformed,
            "the provider's answer is not valid JSON",
        ),
        (DexMode::Hang, "the provider did not answer within 8000 ms"),
    ] {
        p.dex.set(mode);
        let body = p.rig.pay(VM03, &request);
        assert_output_valid("VM03", &body);
        assert_eq!(body["status"], "PARTIAL", "{body:#}");
        assert!(
            body["holdings"]
                .as_array()
                .expect("holdings")
                .iter()
                .all(|h| h["observations"]
                    .to_string()
                    .contains("PRICING_UNAVAILABLE")
                    && h["priced_usd"].is_null())
        );
        assert_eq!(body["valuation"]["priced_usd"], Value::Null);
        assert_eq!(body["valuation"]["as_of"], Value::Null);
        assert!(
            body["readiness"]["evidence_gaps"]
                .to_string()
                .contains("PRICING_PROVIDER_UNAVAILABLE")
        );
        assert!(
            limitations(&body).contains(needle),
            "{needle}: {}",
            limitations(&body)
        );
    }
    p.dex.set(DexMode::Pairs);
    let body = p.rig.pay(VM03, &request);
    assert_output_valid("VM03", &body);
    assert_eq!(holding(&body, &token)["priced_usd"], "6.00");
    let native = &body["holdings"][0];
    assert_eq!(
        native["observations"],
        json!(["PRICED_VIA_WRAPPED_NATIVE", "PRICED_FROM_QUOTE_SIDE"]),
        "WETH is only the quote token of PRC/WETH: priced from that pair"
    );
    assert_eq!(
        native["price_usd"], "2000",
        "priceUsd 2 / priceNative 0.001"
    );
    assert_eq!(native["priced_usd"], "2000.00");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quote_only_tokens_are_priced_by_the_published_relation_and_a_full_answer_claims_no_absence()
 {
    let p = portfolio(&[]).await;
    let stack = &p.rig.stack;
    let owner = fresh_address(6);
    let usdq = deploy(stack, "USDQ", "6", &owner, "303400000");
    let busy = deploy(stack, "BUSY", "18", &owner, "1000000000000000000");
    let absent = deploy(stack, "ABSENT", "18", &owner, "1000000000000000000");
    p.inventory.set(
        "base",
        vec![Page::Entries(vec![
            balance_entry(&usdq, 303400000),
            balance_entry(&busy, 1000000000000000000),
            balance_entry(&absent, 1000000000000000000),
        ])],
    );
    // USDQ is the quote side only: WETH/USDQ, as USDC is on Base. The thin pair loses.
    let mut deep = pair("base", WETH_BASE, &usdq, "2999.4", 12900000.0, "c1");
    deep["priceNative"] = json!("3000");
    let mut thin = pair("base", WETH_BASE, &usdq, "2999.4", 20000.0, "c2");
    thin["priceNative"] = json!("2000");
    p.dex.add(deep);
    p.dex.add(thin);
    let request = json!({"address": owner, "chains": ["eip155:8453"]});
    let body = p.rig.pay(VM03, &request);
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "OK", "{body:#}");
    let usd = holding(&body, &usdq);
    assert_eq!(usd["price_usd"], "0.9998", "2999.4 / 3000");
    assert_eq!(usd["priced_usd"], "303.34");
    assert_eq!(usd["pair_side"], "quote");
    assert_eq!(usd["pair_address"], format!("0x{:0>40}", "c1"));
    assert_eq!(usd["observations"], json!(["PRICED_FROM_QUOTE_SIDE"]));
    let derivation = usd["price_derivation"].as_str().expect("derivation");
    assert!(
        derivation.contains("priceUsd of the base token BASE (2999.4) / priceNative (3000)"),
        "{derivation}"
    );
    assert_eq!(
        holding(&body, &absent)["observations"],
        json!(["NO_DEX_MARKET"])
    );
    assert!(limitations(&body).contains("PRICED_FROM_QUOTE_SIDE"));

    // An answer holding the cap's pair count may have been cut: ABSENT is not NO_DEX_MARKET.
    for i in 0..28 {
        p.dex.add(pair(
            "base",
            &busy,
            WETH_BASE,
            "1",
            50000.0,
            &format!("d{i}"),
        ));
    }
    let body = p.rig.pay(VM03, &request);
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    let cut = holding(&body, &absent);
    assert_eq!(cut["observations"], json!(["DEX_ANSWER_POSSIBLY_CUT"]));
    assert_eq!(holding(&body, &usdq)["price_usd"], "0.9998");
    assert!(
        limitations(&body).contains("held 30 pairs, at least pricing_answer_pair_cap 30"),
        "{}",
        limitations(&body)
    );
    let dex = body["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["role"] == "dex_pricing")
        .expect("dex source");
    assert_eq!(dex["provider_response_complete"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_chain_is_hold_and_no_configured_url_leaks() {
    let closed = closed_port();
    let dead = format!("http://user:SECRETPASS@{}/v2/SECRETKEY-rpc", closed.addr);
    let p = portfolio(&[("FACTOMAT_RPC_URL_EIP155_1", dead.as_str())]).await;
    let owner = fresh_address(5);
    p.rig.stack.chain(&["set-eth", &owner, "1000"]);
    let body = p.rig.pay(VM03, &json!({"address": owner}));
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(body["chains_run"], json!(["eip155:8453"]));
    assert_eq!(body["chain_results"][0]["inventory_status"], "HOLD");
    assert_eq!(
        body["chain_results"][0]["block_number_observed"],
        Value::Null
    );
    assert_eq!(body["readiness"]["evidence_gaps"][0], "CHAIN_UNREADABLE");
    assert!(
        limitations(&body).contains("eip155:1 could not be read (RPC connection failed)"),
        "{}",
        limitations(&body)
    );

    let body = p
        .rig
        .pay(VM03, &json!({"address": owner, "chains": ["eip155:1"]}));
    assert_output_valid("VM03", &body);
    assert_eq!(body["status"], "HOLD");
    assert_eq!(body["readiness"]["status"], "HOLD");
    assert_eq!(body["confidence"], "LOW");
    assert_eq!(body["holdings"], json!([]));
    let native = &body["sources"][0];
    assert_eq!(native["id"], "src-ethereum-native", "{body:#}");
    assert_eq!(
        native["pagination_complete"], false,
        "an unread balance is not a complete read"
    );
    let everything = format!("{body}\n{}", logs());
    assert!(!everything.contains("SECRET"), "a configured secret leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_inventory_credential_is_503_before_any_charge() {
    let dex = Dex::start().await;
    let rig = ChainRig::start(&[
        (
            "FACTOMAT_INVENTORY_URL_EIP155_8453",
            "http://127.0.0.1:9/base",
        ),
        ("FACTOMAT_DEXSCREENER_URL", dex.url.as_str()),
    ])
    .await;
    let before = rig.buyer_balance();
    let answer = rig.pay_unchecked(
        VM03,
        &json!({"address": fresh_address(6), "chains": ["eip155:8453"]}),
    );
    assert_eq!(answer["status"], 503, "{answer}");
    assert_eq!(answer["body"]["error"]["code"], "provider_not_configured");
    assert!(
        answer["body"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("eip155:1 inventory provider"))
    );
    assert_eq!(rig.buyer_balance(), before);
    assert!(dex.batches().is_empty());
}
