//! Free GET endpoints: served from the committed renders with the configured base_url, and
//! they never do provider, ledger or payment work (zero outbound requests).

mod common;

use common::{BASE_URL, TestServer, repo_root};
use serde_json::Value;

const DOCUMENTS: &[(&str, &str, &str)] = &[
    ("/", "generated/index.json", "application/json"),
    ("/v1/catalog", "generated/catalog.json", "application/json"),
    (
        "/openapi.json",
        "generated/openapi.json",
        "application/json",
    ),
    (
        "/llms.txt",
        "generated/llms.txt",
        "text/plain; charset=utf-8",
    ),
    (
        "/.well-known/x402",
        "generated/well-known-x402.json",
        "application/json",
    ),
    (
        "/samples/productive-venue-snapshot",
        "generated/samples/productive-venue-snapshot.json",
        "application/json",
    ),
    (
        "/docs/machines/VM01.md",
        "docs/machines/VM01.md",
        "text/markdown; charset=utf-8",
    ),
    (
        "/docs/machines/VM11.md",
        "docs/machines/VM11.md",
        "text/markdown; charset=utf-8",
    ),
];

#[tokio::test]
async fn documents_match_the_committed_renders_with_the_base_url() {
    let server = TestServer::start().await;
    for (path, committed, content_type) in DOCUMENTS {
        let response = server.get(path).await;
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], *content_type, "{path}");
        assert_eq!(
            response.headers()["access-control-allow-origin"],
            "*",
            "{path}"
        );
        let body = response.text().await.expect("body");
        let expected = std::fs::read_to_string(repo_root().join(committed))
            .expect("committed render")
            .replace("{base_url}", BASE_URL);
        assert_eq!(body, expected, "{path} differs from {committed}");
        assert!(
            !body.contains("{base_url}"),
            "{path} still holds the placeholder"
        );
        if content_type.starts_with("application/json") {
            serde_json::from_str::<Value>(&body).expect("valid JSON");
        }
    }
    assert_eq!(server.outbound(), 0, "free endpoints do no outbound work");
}

#[tokio::test]
async fn head_answers_without_a_body() {
    let server = TestServer::start().await;
    let response = server
        .client
        .head(format!("{}/v1/catalog", server.url))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    let length: usize = response.headers()["content-length"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("number");
    assert!(length > 1000);
    assert!(response.bytes().await.expect("body").is_empty());
}

#[tokio::test]
async fn health_reports_static_facts_only() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let facilitator = format!("http://{closed}");
    let ready = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", common::PAY_TO),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
    ])
    .await;
    let health: Value = ready.get("/health").await.json().await.expect("json");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["service"], "factomat");
    assert_eq!(health["catalog_version"], "factomat-catalog-0.2.0");
    assert_eq!(health["machines"], 11);
    assert_eq!(health["payment"]["pay_to_configured"], true);
    assert_eq!(health["payment"]["facilitator_configured"], true);
    assert_eq!(health["payment"]["network"], "eip155:8453");
    for env in [vec![("FACTOMAT_PAY_TO", common::PAY_TO)], vec![]] {
        let degraded = TestServer::with_env(&env).await;
        let health: Value = degraded.get("/health").await.json().await.expect("json");
        assert_eq!(health["status"], "degraded", "{env:?}");
        assert_eq!(health["payment"]["facilitator_configured"], false);
        assert_eq!(degraded.outbound(), 0, "health does no outbound work");
    }
}

#[tokio::test]
async fn the_base_url_defaults_to_the_bound_address() {
    let server = TestServer::with_env(&[("FACTOMAT_PAY_TO", common::PAY_TO)]).await;
    let catalog: Value = server.get("/v1/catalog").await.json().await.expect("json");
    assert_eq!(
        catalog["machines"][0]["resource"],
        format!("{}/v1/url-context", server.url)
    );
}
