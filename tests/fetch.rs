//! The fetcher's general API (GET/POST JSON, redirects followed or returned, budgets) as
//! VM08–VM10 will use it, against the HTTPS origin on loopback. Without the connect-to seam
//! a loopback target is refused before any I/O.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::https::{Handler, Reply, Seen, Site, TestCa};
use factomat::config::Config;
use factomat::net::gateway::Gateway;
use factomat::net::url_policy::UrlPolicyError;
use factomat::web::fetch::{
    FetchLimits, FetchMethod, FetchRefusal, FetchRequest, Fetcher, Redirects,
};
use serde_json::json;

fn limits() -> FetchLimits {
    FetchLimits {
        max_redirects: 3,
        max_requests: 4,
        max_body_bytes: 262_144,
        per_request: Duration::from_millis(5000),
        overall: Duration::from_millis(15_000),
        max_payment_required_bytes: 8192,
    }
}

fn request(url: &str, method: FetchMethod, redirects: Redirects) -> FetchRequest {
    FetchRequest {
        url: url.parse().expect("url"),
        method,
        redirects,
        limits: limits(),
    }
}

async fn origin() -> (Site, Fetcher, Gateway, TestCa) {
    let ca = TestCa::new();
    let handler: Handler = Arc::new(|seen: &Seen| {
        match seen.path.as_str() {
        "/echo" => Reply::Full {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(&json!({
                "method": seen.method,
                "body": String::from_utf8_lossy(&seen.body),
                "content_type": seen.headers.iter().find(|(k, _)| k == "content-type").map(|(_, v)| v.clone()),
            }))
            .expect("json"),
        },
        "/keep" => Reply::redirect(307, "/echo"),
        "/see-other" => Reply::redirect(303, "/echo"),
        "/paywall" => Reply::Full {
            status: 402,
            headers: vec![("payment-required".into(), "eyJ4NDAyVmVyc2lvbiI6Mn0=".into())],
            body: b"{}".to_vec(),
        },
        _ => Reply::Full { status: 404, headers: Vec::new(), body: Vec::new() },
    }
    });
    let site = Site::start(ca.server_config(&["api.example.com"]), handler).await;
    let config = Config::from_env(ca.env(&[("api.example.com", site.addr)])).expect("config");
    let gateway = Gateway::new().expect("gateway");
    let fetcher = Fetcher::new(gateway.clone(), &config).expect("fetcher");
    (site, fetcher, gateway, ca)
}

#[tokio::test]
async fn post_json_keeps_its_body_on_307_and_becomes_get_on_303() {
    let (_site, fetcher, gateway, _ca) = origin().await;
    let body = FetchMethod::PostJson(json!({"probe": true}));
    let outcome = fetcher
        .fetch(request(
            "https://api.example.com/keep",
            body.clone(),
            Redirects::Follow,
        ))
        .await;
    let response = outcome.result.expect("response");
    let echo: serde_json::Value = serde_json::from_slice(&response.body).expect("json");
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["body"], r#"{"probe":true}"#);
    assert_eq!(echo["content_type"], "application/json");
    assert_eq!((outcome.requests_sent, outcome.redirect_count), (2, 1));

    let outcome = fetcher
        .fetch(request(
            "https://api.example.com/see-other",
            body,
            Redirects::Follow,
        ))
        .await;
    let echo: serde_json::Value =
        serde_json::from_slice(&outcome.result.expect("response").body).expect("json");
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["body"], "");
    assert_eq!(gateway.outbound_requests(), 4, "every hop is counted");
}

#[tokio::test]
async fn redirects_can_be_returned_instead_of_followed_and_402_headers_are_kept() {
    let (site, fetcher, _gateway, _ca) = origin().await;
    let outcome = fetcher
        .fetch(request(
            "https://api.example.com/keep",
            FetchMethod::Get,
            Redirects::Return,
        ))
        .await;
    let response = outcome.result.expect("response");
    assert_eq!(response.status, 307);
    assert_eq!(
        response.headers.get("location").map(String::as_str),
        Some("/echo")
    );
    assert_eq!(site.hits(), 1, "the redirect target was not requested");

    let outcome = fetcher
        .fetch(request(
            "https://api.example.com/paywall",
            FetchMethod::Get,
            Redirects::Return,
        ))
        .await;
    let response = outcome.result.expect("response");
    assert_eq!(response.status, 402);
    assert!(response.headers.contains_key("payment-required"));
}

#[tokio::test]
async fn without_the_seam_loopback_and_private_targets_are_refused_before_any_io() {
    let gateway = Gateway::new().expect("gateway");
    let config = Config::from_env(Vec::<(String, String)>::new()).expect("config");
    assert!(!config.unsafe_test_seams_active());
    let fetcher = Fetcher::new(gateway.clone(), &config).expect("fetcher");
    for url in [
        "https://127.0.0.1/",
        "https://[::1]/",
        "https://10.0.0.1/",
        "https://169.254.169.254/",
    ] {
        let outcome = fetcher
            .fetch(request(url, FetchMethod::Get, Redirects::Follow))
            .await;
        assert_eq!(
            outcome.result.expect_err(url),
            FetchRefusal::UrlPolicy(UrlPolicyError::HostNotPublic),
            "{url}"
        );
        assert_eq!(outcome.requests_sent, 0);
    }
    assert_eq!(gateway.outbound_requests(), 0);
}

#[tokio::test]
async fn the_request_budget_caps_a_call() {
    let (_site, fetcher, gateway, _ca) = origin().await;
    let mut tight = request(
        "https://api.example.com/keep",
        FetchMethod::Get,
        Redirects::Follow,
    );
    tight.limits.max_requests = 1;
    let outcome = fetcher.fetch(tight).await;
    assert_eq!(
        outcome.result.expect_err("budget"),
        FetchRefusal::RequestBudget(1)
    );
    assert_eq!(gateway.outbound_requests(), 1);
}
