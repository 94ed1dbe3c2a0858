//! The extractor on realistic pages written for these tests, read exactly as VM01 reads a
//! fetched body (no network here; the fetch path is covered by tests/web_paid.rs). Every
//! result must validate against VM01's output_schema.

mod common;

use factomat::machines::vm01;
use factomat::web::page;
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let path = common::repo_root().join("tests/fixtures/pages").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn machine() -> &'static factomat::catalog::Machine {
    factomat::catalog::embedded::MANIFEST
        .machines
        .iter()
        .find(|m| m.machine == "VM01")
        .expect("VM01")
}

/// The VM01 response for a body served with `content_type` from `url`.
fn read(bytes: &[u8], content_type: Option<&str>, url: &str) -> Value {
    let limit = machine().limit("max_text_chars").map(|n| n as usize);
    let reading = page::read_local(
        url.to_string(),
        Some(url.parse().expect("url")),
        bytes,
        content_type,
        limit,
    );
    let body = vm01::response(machine(), &reading, "2026-05-04T09:15:22Z");
    assert_valid(&body);
    body
}

fn assert_valid(body: &Value) {
    let schema = common::machine("VM01")["output_schema"].clone();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "VM01 output invalid: {errors:?}\n{body:#}"
    );
}

fn text(body: &Value) -> &str {
    body["content"]["text"].as_str().expect("text")
}

fn outline(body: &Value) -> Vec<(u64, String)> {
    body["outline"]
        .as_array()
        .expect("outline")
        .iter()
        .map(|h| {
            (
                h["level"].as_u64().expect("level"),
                h["text"].as_str().expect("text").to_string(),
            )
        })
        .collect()
}

#[test]
fn news_article_keeps_the_story_and_drops_nav_ads_and_comments() {
    let body = read(
        &fixture("news-article.html"),
        Some("text/html; charset=utf-8"),
        "https://news.example.com/news/2026/03/harbour-bridge-reopens?ref=home",
    );
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(
        body["metadata"]["title"],
        "Harbour bridge reopens after two-year repair | Coastal Times"
    );
    assert_eq!(
        body["metadata"]["description"],
        "The Kestrel Harbour bridge reopened to traffic on Monday after a repair that ran seven months late."
    );
    assert_eq!(
        body["metadata"]["canonical"],
        "https://news.example.com/news/2026/03/harbour-bridge-reopens",
        "a relative canonical is made absolute against the page URL"
    );
    assert_eq!(body["content"]["extraction_basis"], "article");
    let text = text(&body);
    assert!(
        text.starts_with("Transport The Kestrel Harbour bridge reopened"),
        "{text}"
    );
    assert!(text.ends_with("widened by half a metre."), "{text}");
    for boilerplate in [
        "Sections",
        "Search the Coastal Times",
        "Advertisement",
        "Related stories",
        "About time!",
        "harbourwatcher",
        "morning briefing",
        "All rights reserved",
        "We use cookies",
        "dataLayer",
    ] {
        assert!(
            !text.contains(boilerplate),
            "{boilerplate:?} leaked into {text}"
        );
    }
    assert!(
        !text.contains("  ") && !text.contains('\n'),
        "whitespace is normalized"
    );
    let characters = text.chars().count() as u64;
    assert_eq!(body["content"]["characters"], characters);
    assert_eq!(body["content"]["approx_tokens"], characters.div_ceil(4));
    assert_eq!(
        body["content"]["token_estimate_method"],
        "ceil(characters/4)"
    );
    assert_eq!(body["content"]["truncated"], false);
    assert_eq!(
        outline(&body),
        vec![
            (1, "Harbour bridge reopens after two-year repair".into()),
            (2, "Delays and cost".into()),
            (2, "What changes for drivers".into()),
            (3, "Comments (3)".into()),
            (3, "Get the morning briefing".into()),
        ],
        "nav, aside, footer and hidden headings are page chrome"
    );
    assert_eq!(
        body["structured_data"]["json_ld_types"],
        serde_json::json!(["ImageObject", "NewsArticle", "Organization", "Person"])
    );
    let observations = &body["freshness"]["observations"];
    for (source, name, value) in [
        (
            "html_meta",
            "article:published_time",
            "2026-03-02T07:30:00Z",
        ),
        ("html_meta", "article:modified_time", "2026-03-02T11:05:00Z"),
        ("json_ld", "datePublished", "2026-03-02T07:30:00Z"),
        ("json_ld", "dateModified", "2026-03-02T11:05:00Z"),
    ] {
        assert!(
            observations
                .as_array()
                .expect("array")
                .iter()
                .any(|o| o["source"] == source && o["name"] == name && o["value"] == value),
            "missing {source} {name}: {observations}"
        );
    }
    for observation in observations.as_array().expect("array") {
        let keys: Vec<&String> = observation.as_object().expect("object").keys().collect();
        assert_eq!(
            keys,
            ["source", "name", "value"],
            "observed facts only, no label"
        );
    }
    let serialized = serde_json::to_string(&body).expect("json");
    assert_eq!(
        body["size"]["output_json_bytes"],
        serialized.len() as u64,
        "output_json_bytes is the compact size of the response itself"
    );
}

#[test]
fn blog_json_ld_graph_arrays_and_a_malformed_block() {
    let body = read(
        &fixture("blog-graph.html"),
        Some("text/html"),
        "https://blog.example.org/posts/build-cache-object-storage/",
    );
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(
        body["structured_data"]["json_ld_types"],
        serde_json::json!([
            "BlogPosting",
            "BreadcrumbList",
            "ListItem",
            "Organization",
            "Person",
            "SiteNavigationElement",
            "TechArticle",
            "WebSite"
        ]),
        "@graph members, @type arrays, top-level arrays and nested objects all count"
    );
    let notes = body["evidence"]["notes"].to_string();
    assert!(
        notes.contains("JSON-LD block 3 is not valid JSON"),
        "{notes}"
    );
    assert_eq!(
        body["metadata"]["description"],
        "Three months of numbers from moving a CI build cache from local disks to object storage.",
        "og:description stands in for a missing meta description"
    );
    assert_eq!(body["content"]["extraction_basis"], "main");
    assert!(text(&body).contains("The median pipeline went from 14 minutes to 9 minutes"));
    assert!(!text(&body).contains("Opinions are our own"));
    let dates: Vec<(String, String)> = body["freshness"]["observations"]
        .as_array()
        .expect("array")
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap_or_default().to_string(),
                o["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        dates,
        vec![
            ("datePublished".to_string(), "2026-01-14".to_string()),
            ("dateModified".to_string(), "2026-02-03".to_string()),
        ]
    );
}

#[test]
fn docs_page_outline_keeps_every_level_in_order() {
    let body = read(
        &fixture("docs-deep.html"),
        Some("text/html; charset=utf-8"),
        "https://docs.example.net/ferrule/3.2/reference/configuration.html",
    );
    assert_eq!(body["status"], "OK");
    let levels: Vec<u64> = outline(&body).iter().map(|(l, _)| *l).collect();
    assert_eq!(levels, vec![1, 2, 3, 3, 2, 3, 4, 5, 6, 5, 2, 3, 3]);
    assert_eq!(outline(&body)[8].1, "compaction.interval on replicas");
    assert!(
        !outline(&body)
            .iter()
            .any(|(_, t)| t == "Contents" || t == "Versions"),
        "sidebar navigation headings are not the document outline"
    );
    assert_eq!(
        body["content"]["extraction_basis"], "main",
        "role=main counts as main"
    );
    assert!(text(&body).starts_with("Ferrule reads its configuration"));
}

#[test]
fn a_page_without_main_content_is_partial_and_says_why() {
    let body = read(
        &fixture("no-main.html"),
        Some("text/html"),
        "https://app.example.com/login",
    );
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(body["metadata"]["title"], "Sign in");
    assert!(
        body["content"]["characters"].as_u64().expect("n") < 200,
        "{body:#}"
    );
    let limitations = body["limitations"].to_string();
    assert!(
        limitations.contains("short") || limitations.contains("No main text"),
        "{limitations}"
    );
}

#[test]
fn an_empty_document_is_hold() {
    let body = read(
        b"<html><body></body></html>",
        Some("text/html"),
        "https://a.example.com/",
    );
    assert_eq!(body["status"], "HOLD");
    assert_eq!(body["content"]["extraction_basis"], "none");
    assert_eq!(body["content"]["text"], "");
    assert!(!body["limitations"].as_array().expect("array").is_empty());
}

#[test]
fn windows_1252_is_decoded_from_the_meta_tag_or_the_header() {
    let bytes = fixture("latin1.html");
    assert!(
        std::str::from_utf8(&bytes).is_err(),
        "the fixture is not UTF-8"
    );
    for content_type in [
        Some("text/html"),
        Some("text/html; charset=windows-1252"),
        None,
    ] {
        let body = read(&bytes, content_type, "https://cafe.example.fr/carte");
        assert_eq!(body["metadata"]["title"], "Café crème – la carte d’hiver");
        assert!(
            text(&body).contains("14 € pour le plat du jour"),
            "{body:#}"
        );
        assert!(!text(&body).contains('\u{fffd}'));
        assert!(
            body["evidence"]["notes"]
                .to_string()
                .contains("windows-1252")
        );
    }
    // A header charset wins over the meta tag (and here it is wrong, visibly so).
    let body = read(
        &bytes,
        Some("text/html; charset=utf-8"),
        "https://cafe.example.fr/carte",
    );
    assert!(text(&body).contains('\u{fffd}'));
    assert!(body["evidence"]["notes"].to_string().contains("U+FFFD"));
}

#[test]
fn a_huge_page_is_cut_at_the_character_limit_on_a_character_boundary() {
    let paragraph = "<p>Überlänge: a paragraph of the long report, repeated to make the page huge, with commas, clauses, and enough words to look like prose.</p>\n";
    let html = format!(
        "<!doctype html><html><head><title>Long report</title></head><body><article><h1>Long report</h1>{}</article></body></html>",
        paragraph.repeat(1500)
    );
    let body = read(
        html.as_bytes(),
        Some("text/html"),
        "https://reports.example.com/long",
    );
    assert_eq!(
        body["status"], "PARTIAL",
        "truncation makes the reading partial"
    );
    assert_eq!(body["content"]["truncated"], true);
    assert_eq!(body["content"]["characters"], 8000);
    assert_eq!(text(&body).chars().count(), 8000);
    assert_eq!(body["content"]["approx_tokens"], 2000);
    assert!(
        body["size"]["normalized_content_characters"]
            .as_u64()
            .expect("n")
            > 150_000
    );
    assert!(body["limitations"].to_string().contains("cut at 8000"));
}

#[test]
fn malformed_html_is_read_the_way_browsers_repair_it() {
    let body = read(
        &fixture("malformed.html"),
        None,
        "https://tides.example.com/",
    );
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(
        body["metadata"]["title"], "Tide tables & <b>moon</b> phases",
        "title is raw text in HTML"
    );
    assert_eq!(
        body["metadata"]["description"], "Unquoted",
        "an unquoted attribute value ends at the first space"
    );
    assert_eq!(
        outline(&body),
        vec![(1, "Tide tables for Kestrel Harbour".to_string())]
    );
    let text = text(&body);
    assert!(text.contains("00:51 on Wednesday. Boats"), "{text}");
    assert!(text.ends_with("Charts are updated every Monday."), "{text}");
    assert!(!text.contains("document.write"));
}

#[test]
fn non_html_bodies_are_not_extracted() {
    let reading = page::read_local(
        "https://files.example.com/report.pdf".into(),
        None,
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj",
        Some("application/pdf"),
        Some(8000),
    );
    let body = vm01::response(machine(), &reading, "2026-05-04T09:15:22Z");
    assert_valid(&body);
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(body["content"]["text"], "");
    assert!(body["limitations"].to_string().contains("application/pdf"));
}

#[test]
fn the_extract_command_prints_the_same_json() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_factomat"))
        .args([
            "extract",
            "--url",
            "https://blog.example.org/posts/build-cache-object-storage/",
            "--max-text-chars",
            "100",
        ])
        .arg(common::repo_root().join("tests/fixtures/pages/blog-graph.html"))
        .output()
        .expect("factomat runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_valid(&body);
    assert_eq!(body["content"]["characters"], 100);
    assert_eq!(body["content"]["truncated"], true);
    assert_eq!(
        body["metadata"]["canonical"],
        "https://blog.example.org/posts/build-cache-object-storage/"
    );
}

#[test]
fn the_extract_command_reads_standard_input() {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_factomat"))
        .args([
            "extract",
            "--content-type",
            "text/html; charset=windows-1252",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("factomat runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&fixture("latin1.html"))
        .expect("write");
    let output = child.wait_with_output().expect("output");
    assert!(output.status.success());
    let body: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(body["metadata"]["title"], "Café crème – la carte d’hiver");
    assert_eq!(body["http"]["status"], Value::Null, "nothing was fetched");
}
