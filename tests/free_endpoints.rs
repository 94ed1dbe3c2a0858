//! Free GET endpoints: served from the committed renders with the configured base_url, and
//! they never do provider, ledger or payment work (zero outbound requests).

mod common;

use common::{BASE_URL, TestServer, closed_port, repo_root};
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
        "/storefront/",
        "generated/storefront/index.html",
        "text/html; charset=utf-8",
    ),
    (
        "/storefront",
        "generated/storefront/index.html",
        "text/html; charset=utf-8",
    ),
    (
        "/storefront/VM03",
        "generated/storefront/VM03.html",
        "text/html; charset=utf-8",
    ),
    (
        "/storefront/storefront.css",
        "generated/storefront/storefront.css",
        "text/css; charset=utf-8",
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
    let response = raw_client()
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
    let closed = closed_port();
    let facilitator = format!("http://{}", closed.addr);
    let ready = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", common::PAY_TO),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
    ])
    .await;
    let health: Value = ready.get_json("/health").await;
    assert_eq!(health["status"], "ok");
    assert_eq!(health["service"], "factomat");
    assert_eq!(health["catalog_version"], "factomat-catalog-0.2.0");
    assert_eq!(health["machines"], 11);
    assert_eq!(health["payment"]["pay_to_configured"], true);
    assert_eq!(health["payment"]["facilitator_configured"], true);
    assert_eq!(health["payment"]["network"], "eip155:8453");
    for env in [vec![("FACTOMAT_PAY_TO", common::PAY_TO)], vec![]] {
        let degraded = TestServer::with_env(&env).await;
        let health: Value = degraded.get_json("/health").await;
        assert_eq!(health["status"], "degraded", "{env:?}");
        assert_eq!(health["payment"]["facilitator_configured"], false);
        assert_eq!(degraded.outbound(), 0, "health does no outbound work");
    }
}

#[tokio::test]
async fn the_base_url_defaults_to_the_bound_address() {
    let server = TestServer::with_env(&[("FACTOMAT_PAY_TO", common::PAY_TO)]).await;
    let catalog: Value = server.get_json("/v1/catalog").await;
    assert_eq!(
        catalog["machines"][0]["resource"],
        format!("{}/v1/url-context", server.url)
    );
}

/// A client that neither asks for nor decodes compressed bodies on its own, so the test sees
/// the bytes on the wire.
fn raw_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_gzip()
        .no_brotli()
        .no_deflate()
        .build()
        .expect("client")
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

fn unbrotli(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    brotli::Decompressor::new(bytes, 4096)
        .read_to_end(&mut out)
        .expect("valid brotli");
    out
}

#[tokio::test]
async fn compressed_documents_decode_to_the_same_bytes() {
    let server = TestServer::start().await;
    let client = raw_client();
    let max_age = common::manifest()["service"]["free_document_max_age_seconds"]
        .as_u64()
        .expect("manifest lifetime");
    for (path, _, _) in DOCUMENTS {
        let url = format!("{}{path}", server.url);
        let plain = client.get(&url).send().await.expect("answered");
        assert!(plain.headers().get("content-encoding").is_none(), "{path}");
        assert_eq!(
            plain.headers()["cache-control"],
            format!("public, max-age={max_age}").as_str(),
            "{path}"
        );
        assert_eq!(plain.headers()["vary"], "Accept-Encoding", "{path}");
        let identity = plain.bytes().await.expect("body");
        let mut tags = vec![];
        for (coding, decode) in [("gzip", gunzip as fn(&[u8]) -> Vec<u8>), ("br", unbrotli)] {
            let response = client
                .get(&url)
                .header("accept-encoding", coding)
                .send()
                .await
                .expect("answered");
            assert_eq!(response.status().as_u16(), 200, "{path} {coding}");
            assert_eq!(response.headers()["content-encoding"], coding, "{path}");
            tags.push(response.headers()["etag"].clone());
            let wire = response.bytes().await.expect("body");
            assert!(wire.len() < identity.len(), "{path} {coding} is smaller");
            assert_eq!(
                decode(&wire),
                identity,
                "{path} {coding} decodes to the same bytes"
            );
        }
        assert_ne!(
            tags[0], tags[1],
            "{path}: each representation has its own tag"
        );
    }
    let browser_like = client
        .get(format!("{}/openapi.json", server.url))
        .header("accept-encoding", "gzip, deflate, br, zstd")
        .send()
        .await
        .expect("answered");
    assert_eq!(browser_like.headers()["content-encoding"], "br");
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn a_current_etag_gets_304_with_no_body() {
    let server = TestServer::start().await;
    let client = raw_client();
    let url = format!("{}/v1/catalog", server.url);
    for coding in ["identity", "gzip", "br"] {
        let first = client
            .get(&url)
            .header("accept-encoding", coding)
            .send()
            .await
            .expect("answered");
        assert_eq!(first.status().as_u16(), 200);
        let etag = first.headers()["etag"].to_str().expect("ascii").to_string();
        assert!(
            etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
            "strong tag: {etag}"
        );
        let again = client
            .get(&url)
            .header("accept-encoding", coding)
            .header("if-none-match", &etag)
            .send()
            .await
            .expect("answered");
        assert_eq!(again.status().as_u16(), 304, "{coding}");
        assert_eq!(again.headers()["etag"], etag.as_str());
        assert!(again.headers().get("cache-control").is_some());
        assert!(again.bytes().await.expect("body").is_empty(), "{coding}");
        let stale = client
            .get(&url)
            .header("accept-encoding", coding)
            .header("if-none-match", "\"not-the-current-tag\"")
            .send()
            .await
            .expect("answered");
        assert_eq!(stale.status().as_u16(), 200, "{coding}");
        assert!(!stale.bytes().await.expect("body").is_empty());
    }
}
