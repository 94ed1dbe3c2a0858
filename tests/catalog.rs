//! The catalog of SPEC Part 2.1, read over HTTP.

mod common;

use common::{BASE_URL, TestServer};
use serde_json::Value;

const TOP_LEVEL: [&str; 15] = [
    "service",
    "catalog_version",
    "catalog",
    "payment",
    "families",
    "family_wallet_note",
    "machines",
    "rediscovery",
    "openapi",
    "documentation",
    "health",
    "sample",
    "sample_path",
    "status",
    "llms",
];
const MACHINE_FIELDS: [&str; 28] = [
    "machine",
    "family",
    "name",
    "purpose",
    "when_to_call",
    "operationId",
    "method",
    "path",
    "resource",
    "request_content_type",
    "input_schema",
    "input_example",
    "unsupported",
    "allowlists",
    "price",
    "price_atomic",
    "payment",
    "output_schema_ref",
    "output_example",
    "methodology_version",
    "freshness",
    "limits",
    "evidence",
    "health",
    "docs",
    "storefront",
    "related",
    "machine",
];
const EXPECTED: [(&str, &str, &str, &str, &str); 11] = [
    (
        "VM01",
        "WEB_INTELLIGENCE",
        "postVm01UrlContext",
        "$0.01",
        "url-context-0.1.0",
    ),
    (
        "VM02",
        "ONCHAIN_PREFLIGHT",
        "postVm02AllowanceExposure",
        "$0.01",
        "allowance-exposure-0.1.0",
    ),
    (
        "VM03",
        "ONCHAIN_PREFLIGHT",
        "postVm03PortfolioPreflight",
        "$0.01",
        "portfolio-preflight-0.2.0",
    ),
    (
        "VM04",
        "ONCHAIN_PREFLIGHT",
        "postVm04ProductiveVenueSnapshot",
        "$0.01",
        "productive-venue-0.2.0",
    ),
    (
        "VM05",
        "AGENT_COMMERCE",
        "postVm05DiscoveryVisibilitySnapshot",
        "$0.01",
        "discovery-visibility-0.1.0",
    ),
    (
        "VM06",
        "ONCHAIN_PREFLIGHT",
        "postVm06TransactionGasPreflight",
        "$0.005",
        "transaction-gas-preflight-0.1.0",
    ),
    (
        "VM07",
        "WEB_INTELLIGENCE",
        "postVm07WebChangeSnapshot",
        "$0.005",
        "web-change-snapshot-0.1.0",
    ),
    (
        "VM08",
        "AGENT_COMMERCE",
        "postVm08X402ServiceChangeSnapshot",
        "$0.01",
        "x402-service-change-snapshot-0.1.0",
    ),
    (
        "VM09",
        "AGENT_COMMERCE",
        "postVm09X402PresignHandoff",
        "$0.01",
        "x402-presign-handoff-0.1.0",
    ),
    (
        "VM10",
        "AGENT_COMMERCE",
        "postVm10PaymentAuthoritySnapshot",
        "$0.005",
        "payment-authority-snapshot-0.1.0",
    ),
    (
        "VM11",
        "AGENT_COMMERCE",
        "postVm11DiscoveryVisibilityChange",
        "$0.005",
        "discovery-visibility-change-0.1.0",
    ),
];

async fn catalog() -> (TestServer, Value) {
    let server = TestServer::start().await;
    let catalog = server.get_json("/v1/catalog").await;
    (server, catalog)
}

#[tokio::test]
async fn top_level_fields_and_payment_are_as_specified() {
    let (server, catalog) = catalog().await;
    let keys: Vec<&str> = catalog
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, TOP_LEVEL, "exactly the Part 2.1 top-level fields");
    assert_eq!(catalog["service"], "factomat");
    assert_eq!(catalog["catalog_version"], "factomat-catalog-0.2.0");
    let payment = &catalog["payment"];
    assert_eq!(payment["scheme"], "exact");
    assert_eq!(payment["network"], "eip155:8453");
    assert_eq!(
        payment["asset"],
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
    );
    assert_eq!(payment["asset_symbol"], "USDC");
    assert!(payment["note"].as_str().is_some_and(|n| !n.is_empty()));
    for (field, path) in [
        ("openapi", "/openapi.json"),
        ("health", "/health"),
        ("llms", "/llms.txt"),
        ("sample", "/samples/productive-venue-snapshot"),
        ("catalog", "/v1/catalog"),
    ] {
        assert_eq!(catalog[field], format!("{BASE_URL}{path}"), "{field}");
    }
    assert_eq!(catalog["sample_path"], "/samples/productive-venue-snapshot");
    assert!(
        catalog["family_wallet_note"]
            .as_str()
            .is_some_and(|n| n.contains("counts once"))
    );
    assert_eq!(server.outbound(), 0);
}

#[tokio::test]
async fn families_are_the_three_of_part_2_1() {
    let (_server, catalog) = catalog().await;
    let families: Vec<(String, Vec<String>)> = catalog["families"]
        .as_array()
        .expect("families")
        .iter()
        .map(|f| {
            assert!(f["label"].as_str().is_some_and(|l| !l.is_empty()));
            (
                f["family"].as_str().expect("family").to_string(),
                f["machines"]
                    .as_array()
                    .expect("members")
                    .iter()
                    .map(|m| m.as_str().expect("id").to_string())
                    .collect(),
            )
        })
        .collect();
    let expected = [
        ("WEB_INTELLIGENCE", vec!["VM01", "VM07"]),
        ("ONCHAIN_PREFLIGHT", vec!["VM02", "VM03", "VM04", "VM06"]),
        (
            "AGENT_COMMERCE",
            vec!["VM05", "VM08", "VM09", "VM10", "VM11"],
        ),
    ];
    assert_eq!(families.len(), 3);
    for ((family, members), (want_family, want_members)) in families.iter().zip(expected) {
        assert_eq!(family, want_family);
        assert_eq!(members, &want_members);
    }
}

#[tokio::test]
async fn machines_are_vm01_to_vm11_with_every_field() {
    let (server, catalog) = catalog().await;
    let openapi: Value = server.get_json("/openapi.json").await;
    let machines = catalog["machines"].as_array().expect("machines");
    assert_eq!(machines.len(), 11);
    for (entry, (id, family, operation_id, price, methodology)) in machines.iter().zip(EXPECTED) {
        for field in MACHINE_FIELDS {
            assert!(entry.get(field).is_some(), "{id} lacks {field}");
        }
        assert_eq!(entry["machine"], id);
        assert_eq!(entry["family"], family, "{id}");
        assert_eq!(entry["operationId"], operation_id, "{id}");
        assert_eq!(entry["price"], price, "{id}");
        assert_eq!(entry["methodology_version"], methodology, "{id}");
        assert_eq!(entry["method"], "POST", "{id}");
        assert_eq!(entry["request_content_type"], "application/json", "{id}");
        let path = entry["path"].as_str().expect("path");
        assert_eq!(entry["resource"], format!("{BASE_URL}{path}"), "{id}");
        assert_eq!(entry["payment"]["amount"], entry["price_atomic"], "{id}");
        assert_eq!(entry["payment"]["network"], "eip155:8453", "{id}");
        let schema_ref = entry["output_schema_ref"].as_str().expect("ref");
        let pointer = schema_ref.split_once('#').expect("fragment").1;
        assert!(
            openapi.pointer(pointer).is_some(),
            "{id}: {schema_ref} resolves in the OpenAPI document"
        );
        assert!(
            entry["related"].as_array().is_some_and(|r| !r.is_empty()),
            "{id} has siblings"
        );
        for related in entry["related"].as_array().expect("related") {
            assert_eq!(
                related["family"], family,
                "{id}: related[] holds only siblings"
            );
            assert_ne!(related["machine"], id, "{id}: not itself");
            for field in ["machine", "family", "name", "path", "resource", "purpose"] {
                assert!(related.get(field).is_some(), "{id} related lacks {field}");
            }
        }
    }
}
