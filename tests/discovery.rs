//! VM05 and VM11 end to end: the official client pays on the local x402 stack, and the
//! discovery provider is a loopback server speaking the hosted Bazaar API shapes
//! (`/discovery/merchant`, `/discovery/search`) whose listings the tests change between
//! calls. Every network peer is on 127.0.0.1.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::Address;
use common::devstack::DevStack;
use common::{BASE_URL, TestServer, expect_400, machine};
use factomat::support::canonical::{canonical_sha256, sha256_hex};
use serde_json::{Value, json};
use warp::Filter;

const VM05: &str = "/v1/discovery-visibility";
const VM11: &str = "/v1/discovery-visibility-change";
const BASE_PATH: &str = "/platform/v2/x402";
const MERCHANT_PATH: &str = "/platform/v2/x402/discovery/merchant";
const SEARCH_PATH: &str = "/platform/v2/x402/discovery/search";
const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
/// The seller's payTo, as the caller writes it (lowercase).
const SELLER: &str = "0x7d9e3a1c5b2f4e6a8c0d1e2f3a4b5c6d7e8f9a0b";
const OTHER_PAY_TO: &str = "0x90f79bf6eb2c4f870365e785982e1f101e93b906";
/// The submitted resource: upper-case host and an explicit default port. It is never fetched
/// (the name does not even resolve); the listing spells it in lower case without the port.
const RESOURCE: &str = "https://API.Seller.example:443/v1/weather?city=paris&units=metric";
const LISTED: &str = "https://api.seller.example/v1/weather?city=paris&units=metric";
/// Listed URLs that differ from the resource under the URL equality rule.
const DECOYS: [&str; 4] = [
    "https://api.seller.example/v1/weather?units=metric&city=paris",
    "http://api.seller.example/v1/weather?city=paris&units=metric",
    "https://api.seller.example/v1/weather/?city=paris&units=metric",
    "https://api.seller.example:8443/v1/weather?city=paris&units=metric",
];

// ---------------------------------------------------------------------------------------
// The loopback discovery provider

/// How the provider answers one endpoint.
#[derive(Clone)]
enum Reply {
    Json(Value),
    Raw(u16, Vec<u8>),
    Status(u16),
    /// HTTP 429 as CDP sends it: `rate_limit_exceeded` and a `Retry-After` header.
    Limited(&'static str),
    Slow(Duration, Box<Reply>),
}

#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    params: Vec<(String, String)>,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Listings {
    /// By lowercase payTo; a payTo not present gets CDP's empty answer (its "none listed"
    /// since June 2026, which replaced a 404).
    merchants: HashMap<String, Reply>,
    /// By query text; a query not present answers an empty result page.
    searches: HashMap<String, Reply>,
    seen: Vec<Seen>,
}

#[derive(Clone)]
struct Provider {
    listings: Arc<Mutex<Listings>>,
    addr: SocketAddr,
}

impl Provider {
    async fn start() -> Provider {
        let listings = Arc::new(Mutex::new(Listings::default()));
        let shared = listings.clone();
        let route = warp::method()
            .and(warp::path::full())
            .and(warp::query::raw().or(warp::any().map(String::new)).unify())
            .and(warp::header::headers_cloned())
            .then(
                move |method: http::Method,
                      path: warp::path::FullPath,
                      query: String,
                      headers: http::HeaderMap| {
                    let listings = shared.clone();
                    async move {
                        let seen = Seen {
                            method: method.to_string(),
                            path: path.as_str().to_string(),
                            params: url::form_urlencoded::parse(query.as_bytes())
                                .into_owned()
                                .collect(),
                            headers: headers
                                .iter()
                                .map(|(k, v)| {
                                    (k.to_string(), v.to_str().unwrap_or("?").to_string())
                                })
                                .collect(),
                        };
                        let reply = choose(&listings, seen);
                        render(reply).await
                    }
                },
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(warp::serve(route).incoming(listener).run());
        Provider { listings, addr }
    }

    fn base_url(&self) -> String {
        format!("http://{}{BASE_PATH}", self.addr)
    }

    fn merchant(&self, pay_to: &str, reply: Reply) {
        self.lock().merchants.insert(pay_to.to_lowercase(), reply);
    }

    fn no_merchant(&self, pay_to: &str) {
        self.lock().merchants.remove(&pay_to.to_lowercase());
    }

    fn search(&self, query: &str, reply: Reply) {
        self.lock().searches.insert(query.to_string(), reply);
    }

    fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Listings> {
        self.listings.lock().expect("provider state")
    }
}

fn choose(listings: &Mutex<Listings>, seen: Seen) -> Reply {
    let mut listings = listings.lock().expect("provider state");
    let reply = match seen.path.as_str() {
        MERCHANT_PATH => listings
            .merchants
            .get(&seen.param("payTo").unwrap_or_default().to_lowercase())
            .cloned()
            .unwrap_or_else(|| Reply::Json(empty_merchant_answer())),
        SEARCH_PATH => listings
            .searches
            .get(seen.param("query").unwrap_or_default())
            .cloned()
            .unwrap_or_else(|| Reply::Json(search_page(vec![], false))),
        _ => Reply::Status(404),
    };
    listings.seen.push(seen);
    reply
}

async fn render(reply: Reply) -> http::Response<bytes::Bytes> {
    let mut reply = reply;
    while let Reply::Slow(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    let mut retry_after = None;
    let (status, body) = match reply {
        Reply::Json(value) => (200, serde_json::to_vec(&value).expect("json")),
        Reply::Raw(status, bytes) => (status, bytes),
        Reply::Status(status) => (
            status,
            serde_json::to_vec(&json!({"errorType": "not_found", "errorMessage": "none"}))
                .expect("json"),
        ),
        Reply::Limited(after) => {
            retry_after = Some(after);
            let body =
                json!({"errorType": "rate_limit_exceeded", "errorMessage": "rate limit exceeded"});
            (429, serde_json::to_vec(&body).expect("json"))
        }
        Reply::Slow(..) => (500, Vec::new()),
    };
    let mut response = http::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(after) = retry_after {
        response = response.header("retry-after", after);
    }
    response.body(bytes::Bytes::from(body)).expect("response")
}

/// One listed resource in the hosted API's `x402DiscoveryResource` shape.
fn listing(resource: &str) -> Value {
    json!({
        "resource": resource,
        "type": "http",
        "x402Version": 2,
        "description": "Current weather and 7-day forecast for one city.",
        "lastUpdated": "2026-05-01T17:02:11.000Z",
        "accepts": [{
            "scheme": "exact", "network": "eip155:8453", "asset": USDC, "amount": "2000",
            "payTo": checksummed(SELLER), "maxTimeoutSeconds": 60,
            "extra": {"name": "USD Coin", "version": "2"},
        }],
        "extensions": {"bazaar": {
            "info": {"input": {"type": "http", "method": "GET", "queryParams": {"city": "paris"}},
                     "output": {"type": "json", "example": {"temp_c": 21}}},
            "schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                       "properties": {"input": {"type": "object"}}, "required": ["input"]},
        }},
        "serviceName": "Seller Weather",
        "tags": ["weather", "forecast"],
        "iconUrl": "https://api.seller.example/icon.png",
        "curated": false,
        "skillUrl": null,
        "quality": {"l30DaysTotalCalls": 1840, "l30DaysUniquePayers": 37, "lastCalledAt": "2026-05-04T08:58:40.000Z"},
    })
}

/// CDP's answer for a payTo with nothing listed, exactly as observed: no `x402Version`, no
/// `payTo` echo, a pagination holding only `total`.
fn empty_merchant_answer() -> Value {
    json!({"resources": [], "pagination": {"total": 0}})
}

/// A listing in CDP's minimal shape: no `curated` (it means false), a `quality` without
/// `lastCalledAt`, no payment options, and a second listing's non-EVM asset.
fn minimal_listing(resource: &str) -> Value {
    json!({
        "resource": resource,
        "type": "http",
        "x402Version": 2,
        "lastUpdated": "2026-06-11T09:30:00.000Z",
        "accepts": [],
        "quality": {"l30DaysTotalCalls": 0, "l30DaysUniquePayers": 0},
    })
}

fn others(n: usize) -> Vec<Value> {
    (1..=n)
        .map(|i| listing(&format!("https://other{i}.example.com/api")))
        .collect()
}

fn merchant_page(pay_to: &str, resources: Vec<Value>, total: usize) -> Value {
    json!({
        "x402Version": 2,
        "payTo": checksummed(pay_to),
        "resources": resources,
        "pagination": {"limit": 20, "offset": 0, "total": total},
    })
}

fn search_page(resources: Vec<Value>, partial: bool) -> Value {
    json!({"x402Version": 2, "resources": resources, "partialResults": partial, "searchMethod": "hybrid"})
}

fn checksummed(address: &str) -> String {
    Address::from_str(address)
        .expect("address")
        .to_checksum(None)
}

/// JSON nested `depth` arrays deep.
fn nested(depth: usize) -> Vec<u8> {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
}

// ---------------------------------------------------------------------------------------
// The rig: provider + dev stack + server

struct Rig {
    stack: DevStack,
    server: TestServer,
    provider: Provider,
}

async fn rig() -> Rig {
    let provider = Provider::start().await;
    let stack = DevStack::start();
    let pay_to = stack.field("pay_to");
    let facilitator = stack.field("facilitator_url");
    let discovery = provider.base_url();
    let server = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", pay_to.as_str()),
        ("FACTOMAT_BASE_URL", BASE_URL),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
        ("FACTOMAT_DISCOVERY_URL", discovery.as_str()),
    ])
    .await;
    // The server checks the facilitator's /supported once in the background at start-up;
    // wait for it so that it cannot fall inside a measured call.
    for _ in 0..100 {
        if server.outbound() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.outbound(), 1, "only the start-up /supported check");
    Rig {
        stack,
        server,
        provider,
    }
}

impl Rig {
    /// One call paid by the official client. Asserts the settlement, that the provider saw
    /// exactly `expected_reads` discovery GETs, and that the gateway sent nothing else but
    /// the facilitator's /verify and /settle.
    fn pay(&self, path: &str, body: &Value, expected_reads: usize) -> Value {
        let outbound = self.server.outbound();
        let seen = self.provider.seen().len();
        let answer = self.stack.pay(&format!("{}{path}", self.server.url), body);
        assert_eq!(answer["status"], 200, "{answer}");
        assert_eq!(answer["payment_response"]["success"], true, "{answer}");
        let reads = &self.provider.seen()[seen..];
        assert_eq!(reads.len(), expected_reads, "provider reads: {reads:?}");
        for read in reads {
            assert_discovery_request(read);
        }
        assert_eq!(
            self.server.outbound() - outbound,
            expected_reads as u64 + 2,
            "outbound = provider reads + facilitator /verify + /settle; nothing else (the resource is never fetched)"
        );
        answer["body"].clone()
    }
}

/// Only discovery paths, only GET, no credentials of any kind.
fn assert_discovery_request(read: &Seen) {
    assert_eq!(read.method, "GET");
    assert!(
        read.path == MERCHANT_PATH || read.path == SEARCH_PATH,
        "unexpected path {}",
        read.path
    );
    for (name, _) in &read.headers {
        assert!(
            ![
                "authorization",
                "proxy-authorization",
                "cookie",
                "x-api-key",
                "payment-signature",
                "x-payment"
            ]
            .contains(&name.as_str()),
            "the provider received a {name} header"
        );
    }
}

fn assert_valid(id: &str, body: &Value) {
    let validator =
        factomat::catalog::compile_schema(&machine(id)["output_schema"]).expect("schema");
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{id} output breaks its schema: {errors:?}\n{body}"
    );
}

fn vm05_request(queries: &[&str]) -> Value {
    json!({"resource": RESOURCE, "pay_to": SELLER, "queries": queries})
}

fn texts(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_str().expect("string").to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------
// VM05

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm05_reports_presence_positions_and_evidence() {
    let rig = rig().await;
    let p = &rig.provider;
    let mut merchant = vec![listing(DECOYS[0]), listing(LISTED), listing(DECOYS[1])];
    merchant[1]["accepts"][0]["amount"] = json!(2000);
    p.merchant(SELLER, Reply::Json(merchant_page(SELLER, merchant, 3)));
    let mut first = DECOYS.iter().map(|d| listing(d)).collect::<Vec<_>>();
    first.insert(3, listing(LISTED));
    p.search("weather api", Reply::Json(search_page(first, false)));
    // 21 answers for a window of 20: the resource is the 21st, outside the window.
    let mut second = others(20);
    second.push(listing(LISTED));
    p.search(
        "x402 weather forecast",
        Reply::Json(search_page(second, true)),
    );

    let body = rig.pay(
        VM05,
        &vm05_request(&["  x402   weather\tforecast", "weather api"]),
        3,
    );
    assert_valid("VM05", &body);
    assert_eq!(body["status"], "OK", "{body}");
    assert_eq!(body["resource"], RESOURCE);
    assert_eq!(body["pay_to"], SELLER);
    let merchant = &body["merchant"];
    assert_eq!(merchant["presence"], "FOUND");
    assert_eq!(
        merchant["pagination"],
        json!({"limit": 20, "offset": 0, "total": 3, "returned": 3})
    );
    assert_eq!(merchant["error"], Value::Null);
    assert_eq!(
        merchant["provider"],
        json!({"host": "127.0.0.1", "path": MERCHANT_PATH, "method": "GET"})
    );
    let matched = &merchant["match"];
    assert_eq!(matched["resource"], LISTED);
    assert_eq!(matched["type"], "http");
    assert_eq!(matched["x402_version"], 2);
    assert_eq!(matched["last_updated"], "2026-05-01T17:02:11.000Z");
    assert_eq!(
        matched["accepts"],
        json!([{"scheme": "exact", "network": "eip155:8453", "asset": USDC, "amount": "2000",
                "pay_to": checksummed(SELLER), "max_timeout_seconds": 60}])
    );
    assert_eq!(
        matched["extensions_summary"],
        json!({"names": ["bazaar"], "discovery_info_present": true, "discovery_schema_present": true})
    );
    assert_eq!(
        matched["quality"],
        json!({"l30_days_total_calls": 1840, "l30_days_unique_payers": 37, "last_called_at": "2026-05-04T08:58:40.000Z"})
    );
    assert_eq!(matched["service_name"], "Seller Weather");
    assert_eq!(matched["tags"], json!(["weather", "forecast"]));
    assert_eq!(matched["curated"], false);
    assert_eq!(matched["skill_url"], Value::Null);

    let searches = body["searches"].as_array().expect("searches");
    assert_eq!(searches.len(), 2);
    assert_eq!(searches[0]["query"], "weather api");
    assert_eq!(searches[0]["visibility"], "IN_TOP_20");
    assert_eq!(searches[0]["position"], 4, "after three non-equal decoys");
    assert_eq!(searches[0]["returned_count"], 5);
    assert_eq!(searches[0]["partial_results"], false);
    assert_eq!(searches[0]["search_method"], "hybrid");
    assert_eq!(searches[1]["query"], "x402 weather forecast");
    assert_eq!(searches[1]["visibility"], "NOT_IN_TOP_20");
    assert_eq!(searches[1]["position"], Value::Null);
    assert_eq!(searches[1]["returned_count"], 20);
    assert_eq!(searches[1]["partial_results"], true);
    for search in searches {
        assert_eq!(search["error"], Value::Null);
        assert_eq!(search["provider"]["path"], SEARCH_PATH);
        assert!(search["retrieved_at"].is_string());
    }

    let evidence = &body["evidence"];
    assert_eq!(evidence["provider"], "127.0.0.1");
    assert_eq!(evidence["origin"], format!("http://{}", rig.provider.addr));
    assert_eq!(evidence["path_prefix"], "/platform/v2/x402/discovery");
    assert_eq!(evidence["outbound_requests"], 3);
    assert_eq!(evidence["merchant_requests"], 1);
    assert_eq!(evidence["search_requests"], 2);
    assert_eq!(evidence["auth_header_sent"], false);
    assert_eq!(evidence["submitted_resource_fetched"], false);
    assert!(
        evidence["url_equality"]
            .as_str()
            .is_some_and(|t| t.contains("query parameter order significant"))
    );
    let limitations = texts(&body["limitations"]).join("\n");
    for needle in [
        "not a global rank or a removal claim",
        "partial_results true",
        "not verify",
        "returned 21 results",
    ] {
        assert!(limitations.contains(needle), "{needle}: {limitations}");
    }

    let reads = rig.provider.seen();
    let merchant_read = reads
        .iter()
        .find(|r| r.path == MERCHANT_PATH)
        .expect("merchant read");
    assert_eq!(
        merchant_read.param("payTo"),
        Some(checksummed(SELLER).as_str())
    );
    assert_eq!(merchant_read.param("limit"), Some("20"));
    assert_eq!(merchant_read.param("offset"), Some("0"));
    let mut queries: Vec<(&str, &str)> = reads
        .iter()
        .filter(|r| r.path == SEARCH_PATH)
        .map(|r| {
            (
                r.param("query").unwrap_or_default(),
                r.param("limit").unwrap_or_default(),
            )
        })
        .collect();
    queries.sort();
    assert_eq!(
        queries,
        vec![("weather api", "20"), ("x402 weather forecast", "20")],
        "one search per normalized query"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm05_states_every_presence_value_and_holds_on_provider_failures() {
    let rig = rig().await;
    let p = &rig.provider;
    let request = vm05_request(&["weather api"]);
    let call = |reads: usize| {
        let body = rig.pay(VM05, &request, reads);
        assert_valid("VM05", &body);
        body
    };

    // CDP's empty answer (no payTo echo, pagination with total only) means "none listed".
    p.no_merchant(SELLER);
    let body = call(2);
    assert_eq!(
        (
            body["status"].as_str(),
            body["merchant"]["presence"].as_str()
        ),
        (Some("OK"), Some("NOT_FOUND"))
    );
    assert_eq!(body["merchant"]["error"], Value::Null);
    assert_eq!(body["searches"][0]["visibility"], "NOT_IN_TOP_20");
    assert_eq!(body["searches"][0]["returned_count"], 0);

    // The payTo lists other resources and decoys only, on a complete page.
    let mut listed: Vec<Value> = DECOYS.iter().map(|d| listing(d)).collect();
    listed.extend(others(2));
    p.merchant(SELLER, Reply::Json(merchant_page(SELLER, listed, 6)));
    let body = call(2);
    assert_eq!(body["status"], "OK");
    assert_eq!(
        body["merchant"]["presence"],
        "MERCHANT_FOUND_RESOURCE_NOT_LISTED"
    );
    assert_eq!(body["merchant"]["match"], Value::Null);
    assert_eq!(body["merchant"]["pagination"]["returned"], 6);

    // Not on the first page while more listings exist: presence cannot be stated.
    p.merchant(SELLER, Reply::Json(merchant_page(SELLER, others(20), 45)));
    let body = call(2);
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(body["merchant"]["presence"], "UNKNOWN");
    assert_eq!(body["merchant"]["error"], Value::Null);
    assert!(texts(&body["limitations"]).join(" ").contains("total 45"));

    // An empty listing with every field is "none listed" too.
    p.merchant(SELLER, Reply::Json(merchant_page(SELLER, vec![], 0)));
    assert_eq!(call(2)["merchant"]["presence"], "NOT_FOUND");

    // CDP's minimal entries: curated omitted is false, quality without lastCalledAt, no
    // payment options; a Solana entry beside it is passed through as listed.
    let mut solana = minimal_listing("https://other.example.com/sol");
    solana["accepts"] = json!([{"scheme": "exact", "network": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
        "asset": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "amount": "1000",
        "payTo": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin", "maxTimeoutSeconds": 60}]);
    p.merchant(
        SELLER,
        Reply::Json(
            json!({"resources": [solana, minimal_listing(LISTED)], "pagination": {"total": 2}}),
        ),
    );
    let body = call(2);
    assert_eq!(body["status"], "OK", "{body}");
    let matched = &body["merchant"]["match"];
    assert_eq!(body["merchant"]["presence"], "FOUND");
    assert_eq!(matched["curated"], false, "curated omitted means false");
    assert_eq!(matched["accepts"], json!([]));
    assert_eq!(
        matched["quality"],
        json!({"l30_days_total_calls": 0, "l30_days_unique_payers": 0, "last_called_at": null})
    );
    assert_eq!(matched["description"], Value::Null);

    // 429 is its own code, with CDP's Retry-After in the error and the limitations.
    p.merchant(SELLER, Reply::Limited("2"));
    let body = call(2);
    assert_eq!(body["status"], "HOLD", "{body}");
    assert_eq!(body["merchant"]["presence"], "UNKNOWN");
    assert_eq!(body["merchant"]["error"]["code"], "provider_rate_limited");
    assert_eq!(body["merchant"]["error"]["retry_after"], "2");
    assert!(
        texts(&body["limitations"])
            .join(" ")
            .contains("Retry-After 2")
    );
    p.search(
        "weather api",
        Reply::Limited("Wed, 21 Oct 2026 07:28:00 GMT"),
    );
    p.merchant(SELLER, Reply::Json(empty_merchant_answer()));
    let body = call(2);
    assert_eq!(body["status"], "PARTIAL", "{body}");
    assert_eq!(
        body["searches"][0]["error"]["code"],
        "provider_rate_limited"
    );
    assert_eq!(
        body["searches"][0]["error"]["retry_after"],
        "Wed, 21 Oct 2026 07:28:00 GMT"
    );
    p.search("weather api", Reply::Json(search_page(vec![], false)));

    // Provider failures: the merchant read decides HOLD.
    let many_keys: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!(i))).collect();
    let failures: Vec<(Reply, &str, &str)> = vec![
        // No longer "none listed": a provider or base URL without CDP's merchant endpoint.
        (
            Reply::Status(404),
            "provider_endpoint_missing",
            "the provider does not serve the merchant endpoint",
        ),
        (Reply::Status(500), "provider_http_status", "HTTP 500"),
        (
            Reply::Raw(200, b"<html>busy</html>".to_vec()),
            "invalid_json",
            "not valid JSON",
        ),
        (
            Reply::Json(json!({"x402Version": 2, "items": []})),
            "unexpected_answer",
            "no resources array",
        ),
        (
            Reply::Json(merchant_page(OTHER_PAY_TO, vec![listing(LISTED)], 1)),
            "unexpected_answer",
            "another payTo",
        ),
        (
            Reply::Raw(200, vec![b' '; 300_000]),
            "response_too_large",
            "max_response_bytes 262144",
        ),
        (
            Reply::Raw(200, nested(40)),
            "json_limit_exceeded",
            "max_json_depth 32",
        ),
        (
            Reply::Json(json!({"resources": [], "pagination": many_keys})),
            "json_limit_exceeded",
            "max_object_keys 64",
        ),
    ];
    for (reply, code, message) in failures {
        p.merchant(SELLER, reply);
        let body = call(2);
        assert_eq!(body["status"], "HOLD", "{code}: {body}");
        assert_eq!(body["merchant"]["presence"], "UNKNOWN");
        assert_eq!(body["merchant"]["match"], Value::Null);
        assert_eq!(body["merchant"]["error"]["code"], code, "{body}");
        let text = body["merchant"]["error"]["message"]
            .as_str()
            .expect("message");
        assert!(text.contains(message), "{code}: {text}");
        assert!(
            texts(&body["limitations"]).join(" ").contains(code),
            "{code}: limitations name the failure"
        );
        assert_eq!(body["searches"][0]["visibility"], "NOT_IN_TOP_20");
    }

    // A search answer over a JSON bound holds the whole result (fail closed).
    p.merchant(
        SELLER,
        Reply::Json(merchant_page(SELLER, vec![listing(LISTED)], 1)),
    );
    // 1 + 1 + 1 + 64 + 64 * 64 + 64 * 64 * 5 values: over 20000 while every array holds 64.
    let wide = vec![Value::Array(vec![json!([0, 0, 0, 0, 0]); 64]); 64];
    p.search(
        "weather api",
        Reply::Json(json!({"resources": [], "noise": wide})),
    );
    let body = call(2);
    assert_eq!(body["status"], "HOLD");
    assert_eq!(body["merchant"]["presence"], "FOUND");
    assert_eq!(body["searches"][0]["visibility"], "UNKNOWN");
    assert_eq!(body["searches"][0]["error"]["code"], "json_limit_exceeded");
    assert!(
        body["searches"][0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_json_nodes 20000"))
    );

    // A search that answers too late is UNKNOWN; the rest still stands (PARTIAL).
    p.search(
        "weather api",
        Reply::Slow(
            Duration::from_millis(9000),
            Box::new(Reply::Json(search_page(vec![listing(LISTED)], false))),
        ),
    );
    let body = call(2);
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(body["merchant"]["presence"], "FOUND");
    let search = &body["searches"][0];
    assert_eq!(search["visibility"], "UNKNOWN");
    assert_eq!(search["position"], Value::Null);
    assert_eq!(search["retrieved_at"], Value::Null);
    assert_eq!(search["error"]["code"], "provider_timeout");
    assert!(
        search["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("response_timeout_ms 8000"))
    );

    // A search 404 is a failed read, not "absent".
    p.search("weather api", Reply::Status(404));
    let body = call(2);
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(body["searches"][0]["visibility"], "UNKNOWN");
    assert_eq!(
        body["searches"][0]["error"]["code"],
        "provider_endpoint_missing"
    );
}

// ---------------------------------------------------------------------------------------
// VM11

fn vm11_request(baseline: Option<&Value>) -> Value {
    let mut request = json!({"resource": RESOURCE, "pay_to": SELLER, "queries": ["x402 weather forecast", " weather  api"]});
    if let Some(baseline) = baseline {
        request["baseline"] = baseline.clone();
    }
    request
}

/// The seals as a caller recomputes them.
fn assert_sealed(baseline: &Value) {
    assert_eq!(
        baseline["observation_sha256"],
        canonical_sha256(&baseline["observation"])
    );
    common::assert_sealed_by(baseline, "baseline_sha256");
}

/// (class, path, baseline_value, current_value) of every delta.
fn deltas(body: &Value) -> Vec<(String, String, Value, Value)> {
    body["deltas"]
        .as_array()
        .expect("deltas")
        .iter()
        .map(|d| {
            (
                d["class"].as_str().expect("class").to_string(),
                d["path"].as_str().expect("path").to_string(),
                d["baseline_value"].clone(),
                d["current_value"].clone(),
            )
        })
        .collect()
}

fn delta(class: &str, path: &str, baseline: &str, current: &str) -> (String, String, Value, Value) {
    (class.into(), path.into(), json!(baseline), json!(current))
}

impl Rig {
    fn vm11(&self, baseline: Option<&Value>) -> Value {
        let body = self.pay(VM11, &vm11_request(baseline), 3);
        assert_valid("VM11", &body);
        assert_sealed(&body["current_baseline"]);
        assert_eq!(body["direct_x402_probe"], false);
        assert_eq!(body["server_baseline_stored"], false);
        assert_eq!(
            body["queries"],
            json!(["weather api", "x402 weather forecast"])
        );
        body
    }

    fn expect_changed(&self, baseline: &Value, classes: &[&str]) -> Value {
        let body = self.vm11(Some(baseline));
        assert_eq!(body["decision"], "CHANGED", "{body}");
        assert_eq!(body["status"], "OK");
        assert_eq!(body["comparison_performed"], true);
        assert_eq!(body["material_change_classes"], json!(classes), "{body}");
        assert_eq!(body["current_baseline"]["reusable"], true);
        body
    }

    /// A request that must be refused before any payment, provider read or outbound request.
    async fn expect_rejected(&self, request: &Value, code: &str) {
        let (outbound, seen) = (self.server.outbound(), self.provider.seen().len());
        expect_400(self.server.post_json(VM11, request).await, code, code).await;
        assert_eq!(self.server.outbound(), outbound);
        assert_eq!(self.provider.seen().len(), seen);
    }
}

fn weather_api_results(position: usize) -> Reply {
    let mut items: Vec<Value> = DECOYS.iter().map(|d| listing(d)).collect();
    items.insert(position - 1, listing(LISTED));
    Reply::Json(search_page(items, false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm11_creates_continues_and_detects_each_change_class() {
    let rig = rig().await;
    let p = &rig.provider;
    let page = |item: Value| Reply::Json(merchant_page(SELLER, vec![item, listing(DECOYS[2])], 2));
    p.merchant(SELLER, page(listing(LISTED)));
    p.search("weather api", weather_api_results(4));
    p.search(
        "x402 weather forecast",
        Reply::Json(search_page(vec![listing(LISTED), listing(DECOYS[0])], true)),
    );

    // 1. No baseline: a complete observation becomes a reusable sealed baseline.
    let created = rig.vm11(None);
    assert_eq!(created["decision"], "BASELINE_CREATED", "{created}");
    assert_eq!(created["status"], "OK");
    assert_eq!(created["comparison_performed"], false);
    assert_eq!(created["deltas"], json!([]));
    assert_eq!(created["hold_reason"], Value::Null);
    let b1 = created["current_baseline"].clone();
    assert_eq!(b1["reusable"], true);
    assert_eq!(b1["observation_complete"], true);
    assert_eq!(b1["resource"], RESOURCE);
    assert_eq!(b1["pay_to"], SELLER);
    assert_eq!(
        (
            &b1["search_window"],
            &b1["merchant_page_limit"],
            &b1["merchant_page_offset"]
        ),
        (&json!(20), &json!(20), &json!(0))
    );
    assert_eq!(
        b1["observation"],
        json!({
            "merchant_presence": "FOUND",
            "merchant_note": null,
            "metadata": {
                "service_name": "Seller Weather",
                "description": "Current weather and 7-day forecast for one city.",
                "tags": ["forecast", "weather"],
                "curated": false,
                "icon_url": "https://api.seller.example/icon.png",
                "skill_url": null,
            },
            "schema_discovery": {"type": "http", "x402_version": 2, "extension_names": ["bazaar"],
                                 "discovery_info_present": true, "discovery_schema_present": true},
            "payment": [{"scheme": "exact", "network": "eip155:8453", "asset": USDC, "amount": "2000",
                         "pay_to": checksummed(SELLER), "max_timeout_seconds": 60}],
            "searches": [
                {"query": "weather api", "visibility": "IN_TOP_20", "position": 4,
                 "window_note": "Position within the first 20 search results."},
                {"query": "x402 weather forecast", "visibility": "IN_TOP_20", "position": 1,
                 "window_note": "Position within the first 20 search results."},
            ],
        })
    );

    // 2. Nothing changed: CONTINUE, and the same observation seal.
    let same = rig.vm11(Some(&b1));
    assert_eq!(same["decision"], "CONTINUE", "{same}");
    assert_eq!(same["status"], "OK");
    assert_eq!(same["comparison_performed"], true);
    assert_eq!(same["deltas"], json!([]));
    assert_eq!(same["material_change_classes"], json!([]));
    assert_eq!(
        same["current_baseline"]["observation_sha256"],
        b1["observation_sha256"]
    );

    // 3. The position moved inside the window.
    p.search("weather api", weather_api_results(2));
    let moved = rig.expect_changed(&b1, &["POSITION_CHANGED"]);
    assert_eq!(
        deltas(&moved),
        vec![delta("POSITION_CHANGED", "searches[0].position", "4", "2")]
    );
    let b3 = moved["current_baseline"].clone();

    // 4. The listing dropped out of one query's window.
    p.search(
        "x402 weather forecast",
        Reply::Json(search_page(others(20), true)),
    );
    let dropped = rig.expect_changed(&b3, &["VISIBILITY_CHANGED"]);
    assert_eq!(
        deltas(&dropped),
        vec![
            delta(
                "VISIBILITY_CHANGED",
                "searches[1].visibility",
                "\"IN_TOP_20\"",
                "\"NOT_IN_TOP_20\""
            ),
            delta("VISIBILITY_CHANGED", "searches[1].position", "1", "null"),
            delta(
                "VISIBILITY_CHANGED",
                "searches[1].window_note",
                "\"Position within the first 20 search results.\"",
                "\"Not observed in the first 20 results; not a global-rank or removal claim.\""
            ),
        ]
    );
    let b4 = dropped["current_baseline"].clone();

    // 5. Price and payTo changed in the listing's accepts.
    let mut repriced = listing(LISTED);
    repriced["accepts"][0]["amount"] = json!("3000");
    repriced["accepts"][0]["payTo"] = json!(checksummed(OTHER_PAY_TO));
    p.merchant(SELLER, page(repriced.clone()));
    let payment = rig.expect_changed(&b4, &["PAYMENT_CHANGED"]);
    assert_eq!(
        deltas(&payment),
        vec![
            delta(
                "PAYMENT_CHANGED",
                "payment[0].amount",
                "\"2000\"",
                "\"3000\""
            ),
            delta(
                "PAYMENT_CHANGED",
                "payment[0].pay_to",
                &format!("\"{}\"", checksummed(SELLER)),
                &format!("\"{}\"", checksummed(OTHER_PAY_TO))
            ),
        ]
    );
    let b5 = payment["current_baseline"].clone();

    // Reordered tags, a refreshed quality and lastUpdated are not material changes.
    let mut refreshed = repriced.clone();
    refreshed["tags"] = json!(["forecast", "weather"]);
    refreshed["quality"]["l30DaysTotalCalls"] = json!(99_999);
    refreshed["lastUpdated"] = json!("2026-06-01T00:00:00.000Z");
    p.merchant(SELLER, page(refreshed.clone()));
    assert_eq!(rig.vm11(Some(&b5))["decision"], "CONTINUE");

    // 6. Metadata and schema discovery changed.
    let mut described = refreshed.clone();
    described["description"] = json!("Weather, now with air quality.");
    described["tags"] = json!(["weather", "air"]);
    described["extensions"]
        .as_object_mut()
        .expect("extensions")
        .insert("sign-in-with-x".into(), json!({}));
    p.merchant(SELLER, page(described));
    let metadata = rig.expect_changed(&b5, &["METADATA_CHANGED", "SCHEMA_DISCOVERY_CHANGED"]);
    assert_eq!(
        deltas(&metadata),
        vec![
            delta(
                "METADATA_CHANGED",
                "metadata.description",
                "\"Current weather and 7-day forecast for one city.\"",
                "\"Weather, now with air quality.\""
            ),
            delta(
                "METADATA_CHANGED",
                "metadata.tags",
                "[\"forecast\",\"weather\"]",
                "[\"air\",\"weather\"]"
            ),
            delta(
                "SCHEMA_DISCOVERY_CHANGED",
                "schema_discovery.extension_names",
                "[\"bazaar\"]",
                "[\"bazaar\",\"sign-in-with-x\"]"
            ),
        ]
    );
    let b6 = metadata["current_baseline"].clone();

    // 7. The listing dropped from the merchant index (the payTo still lists a decoy).
    p.merchant(
        SELLER,
        Reply::Json(merchant_page(SELLER, vec![listing(DECOYS[2])], 1)),
    );
    let gone = rig.expect_changed(
        &b6,
        &[
            "PRESENCE_CHANGED",
            "METADATA_CHANGED",
            "SCHEMA_DISCOVERY_CHANGED",
            "PAYMENT_CHANGED",
        ],
    );
    let found = deltas(&gone);
    assert_eq!(
        found[0],
        delta(
            "PRESENCE_CHANGED",
            "merchant_presence",
            "\"FOUND\"",
            "\"MERCHANT_FOUND_RESOURCE_NOT_LISTED\""
        )
    );
    assert!(
        found
            .iter()
            .any(|d| d.1 == "payment[0]" && d.3 == Value::Null)
    );
    let b7 = gone["current_baseline"].clone();
    assert_eq!(b7["observation"]["payment"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm11_holds_never_replace_a_baseline_and_bad_baselines_are_refused_before_payment() {
    let rig = rig().await;
    let p = &rig.provider;
    p.merchant(
        SELLER,
        Reply::Json(merchant_page(SELLER, vec![listing(LISTED)], 1)),
    );
    p.search("weather api", weather_api_results(1));
    let good = rig.vm11(None);
    assert_eq!(good["decision"], "BASELINE_CREATED");
    let baseline = good["current_baseline"].clone();

    // A failed search: HOLD, nothing compared, the new baseline is not reusable.
    p.search("weather api", Reply::Status(503));
    let held = rig.vm11(Some(&baseline));
    assert_eq!(held["decision"], "HOLD", "{held}");
    assert_eq!(held["status"], "PARTIAL");
    assert_eq!(held["comparison_performed"], false);
    assert_eq!(held["deltas"], json!([]));
    assert_eq!(held["material_change_classes"], json!([]));
    let reason = held["hold_reason"].as_str().expect("hold_reason");
    assert!(
        reason.contains("HTTP 503") && reason.contains("Keep your baseline"),
        "{reason}"
    );
    let not_reusable = held["current_baseline"].clone();
    assert_eq!(not_reusable["reusable"], false);
    assert_eq!(not_reusable["observation_complete"], false);
    assert_eq!(
        not_reusable["observation"]["searches"][0]["visibility"],
        "UNKNOWN"
    );

    // The HOLD's baseline cannot replace the good one: it is refused before payment.
    rig.expect_rejected(&vm11_request(Some(&not_reusable)), "baseline_not_reusable")
        .await;

    // Tampered and foreign baselines are refused before payment too.
    let mut tampered = baseline.clone();
    tampered["observation"]["searches"][0]["position"] = json!(2);
    rig.expect_rejected(&vm11_request(Some(&tampered)), "baseline_tampered")
        .await;
    let mut resealed = tampered.clone();
    resealed["observation_sha256"] = json!(canonical_sha256(&tampered["observation"]));
    rig.expect_rejected(&vm11_request(Some(&resealed)), "baseline_tampered")
        .await;
    let mut foreign = vm11_request(Some(&baseline));
    foreign["pay_to"] = json!(OTHER_PAY_TO);
    rig.expect_rejected(&foreign, "baseline_foreign").await;
    let mut other_queries = vm11_request(Some(&baseline));
    other_queries["queries"] = json!(["weather api", "forecast"]);
    rig.expect_rejected(&other_queries, "baseline_foreign")
        .await;

    // Once the provider recovers, the kept baseline compares as before.
    p.search("weather api", weather_api_results(1));
    let again = rig.vm11(Some(&baseline));
    assert_eq!(again["decision"], "CONTINUE", "{again}");

    // The same resource spelled as the listing spells it (lower-case host, no port) is bound
    // to the baseline: it compares, and the answer quotes the caller's text as given.
    let mut respelled = vm11_request(Some(&baseline));
    respelled["resource"] = json!(LISTED);
    let same = rig.pay(VM11, &respelled, 3);
    assert_valid("VM11", &same);
    assert_eq!(same["decision"], "CONTINUE", "{same}");
    assert_eq!(same["resource"], LISTED);
    assert_eq!(same["current_baseline"]["resource"], LISTED);
    assert_eq!(baseline["resource"], RESOURCE);

    // A long description is sealed as its digest; the change is still visible.
    let long = "Weather. ".repeat(200);
    let mut verbose = listing(LISTED);
    verbose["description"] = json!(long);
    p.merchant(
        SELLER,
        Reply::Json(merchant_page(SELLER, vec![verbose.clone()], 1)),
    );
    let digested = rig.vm11(Some(&baseline));
    assert_eq!(digested["decision"], "CHANGED");
    let sealed = format!("sha256:{}", sha256_hex(long.as_bytes()));
    assert_eq!(
        deltas(&digested),
        vec![delta(
            "METADATA_CHANGED",
            "metadata.description",
            "\"Current weather and 7-day forecast for one city.\"",
            &format!("\"{sealed}\"")
        )]
    );

    // A complete observation whose baseline could not be sent back is not reusable: HOLD.
    verbose["tags"] = json!(
        (0..16)
            .map(|i| format!("{i}{}", "t".repeat(1000)))
            .collect::<Vec<_>>()
    );
    p.merchant(SELLER, Reply::Json(merchant_page(SELLER, vec![verbose], 1)));
    let oversized = rig.vm11(Some(&baseline));
    assert_eq!(oversized["decision"], "HOLD", "{oversized}");
    assert_eq!(oversized["status"], "HOLD");
    assert_eq!(oversized["comparison_performed"], false);
    assert_eq!(oversized["current_baseline"]["observation_complete"], true);
    assert_eq!(oversized["current_baseline"]["reusable"], false);
    let reason = oversized["hold_reason"].as_str().expect("hold_reason");
    assert!(reason.contains("max_baseline_bytes 12288"), "{reason}");

    // Without a baseline an incomplete observation is a HOLD, never BASELINE_CREATED, and
    // a JSON bound names its limit.
    p.merchant(SELLER, Reply::Raw(200, nested(33)));
    let first = rig.vm11(None);
    assert_eq!(first["decision"], "HOLD");
    assert_eq!(first["status"], "HOLD");
    assert_eq!(first["comparison_performed"], false);
    assert_eq!(first["current_baseline"]["reusable"], false);
    assert_eq!(
        first["current_baseline"]["observation"]["merchant_presence"],
        "UNKNOWN"
    );
    let reason = first["hold_reason"].as_str().expect("hold_reason");
    assert!(reason.contains("max_json_depth 32"), "{reason}");
}

// ---------------------------------------------------------------------------------------
// Before payment: no rail needed

#[tokio::test]
async fn the_manifest_example_baseline_is_sealed_and_accepted_back() {
    let vm11 = machine("VM11");
    let baseline = vm11["output_example"]["current_baseline"].clone();
    assert_sealed(&baseline);
    let mut request = vm11["input_example"].clone();
    request["baseline"] = baseline;
    let server = TestServer::start().await;
    let response = server.post_json(VM11, &request).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(server.outbound(), 0);
}

/// A baseline sealed for `resource`, as the caller would receive it (the seal recomputed).
fn baseline_for(resource: &str) -> Value {
    let mut baseline = machine("VM11")["output_example"]["current_baseline"].clone();
    baseline["resource"] = json!(resource);
    let object = baseline.as_object_mut().expect("object");
    object.shift_remove("baseline_sha256");
    let seal = canonical_sha256(&baseline);
    baseline["baseline_sha256"] = json!(seal);
    baseline
}

#[tokio::test]
async fn a_baseline_binds_its_resource_under_the_url_equality_rule_not_as_text() {
    let server = TestServer::start().await;
    let request = |resource: &str, sealed_for: &str| {
        let mut request = machine("VM11")["input_example"].clone();
        request["resource"] = json!(resource);
        request["baseline"] = baseline_for(sealed_for);
        request
    };
    let equal = [
        (
            "https://API.Example.com/v1/weather",
            "https://api.example.com/v1/weather",
        ),
        (
            "https://api.example.com:443/v1/weather",
            "https://api.example.com/v1/weather",
        ),
        ("https://api.example.com", "https://api.example.com/"),
        ("https://Api.Example.COM:443", "https://api.example.com/"),
        (
            "https://api.example.com/v1/weather?",
            "https://api.example.com/v1/weather",
        ),
    ];
    for (resource, sealed_for) in equal {
        let response = server.post_json(VM11, &request(resource, sealed_for)).await;
        assert_eq!(
            response.status().as_u16(),
            402,
            "{resource} vs {sealed_for}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    let different = [
        (
            "https://api.example.com/v1/weather/",
            "https://api.example.com/v1/weather",
        ),
        (
            "https://api.example.com/V1/weather",
            "https://api.example.com/v1/weather",
        ),
        (
            "https://api.example.com/v1/weather?a=1",
            "https://api.example.com/v1/weather",
        ),
        (
            "https://www.api.example.com/v1/weather",
            "https://api.example.com/v1/weather",
        ),
    ];
    for (resource, sealed_for) in different {
        let response = server.post_json(VM11, &request(resource, sealed_for)).await;
        expect_400(response, "baseline_foreign", resource).await;
    }
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn without_a_discovery_provider_a_payment_gets_503_and_nothing_is_sent() {
    // A facilitator tripwire: anything but the start-up /supported check would be paid work.
    let tripped = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = tripped.clone();
    let tripwire = warp::path::full().map(move |path: warp::path::FullPath| {
        record
            .lock()
            .expect("tripwire")
            .push(path.as_str().to_string());
        warp::reply::json(&json!({"kinds": []}))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let facilitator = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(warp::serve(tripwire).incoming(listener).run());
    let server = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", common::PAY_TO),
        ("FACTOMAT_BASE_URL", BASE_URL),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
    ])
    .await;
    for (path, body) in [
        (VM05, vm05_request(&["weather api"])),
        (VM11, vm11_request(None)),
    ] {
        let response = server
            .client
            .post(format!("{}{path}", server.url))
            .header("PAYMENT-SIGNATURE", "eyJ4NDAyVmVyc2lvbiI6Mn0=")
            .json(&body)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status().as_u16(), 503, "{path}");
        let error: Value = response.json().await.expect("json");
        assert_eq!(error["error"]["code"], "provider_not_configured", "{path}");
    }
    let paths = tripped.lock().expect("tripwire").clone();
    assert!(
        paths.iter().all(|p| p == "/supported"),
        "no /verify or /settle: {paths:?}"
    );
}
