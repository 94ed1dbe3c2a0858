//! The storefront in a real browser: Debian's headless chromium, driven by playwright-core
//! (tests/browser/storefront.mjs, installed by scripts/install-test-tools), visits the index and
//! every machine page of a loopback server. No console error while a page loads, no request
//! leaves loopback, every link resolves, and each "see the payment terms" button shows the
//! amount, asset, network and payTo of the server's own 402 (decoded here from its
//! PAYMENT-REQUIRED header, independently of the page, which reads the JSON body).

mod common;

use std::path::PathBuf;

use common::{TestServer, decode_header, machine, manifest, repo_root};
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";
const SCREENSHOT_MACHINE: &str = "VM01";

fn machine_ids() -> Vec<String> {
    manifest()["machines"]
        .as_array()
        .expect("machines")
        .iter()
        .map(|m| m["machine"].as_str().expect("id").to_string())
        .collect()
}

async fn run_browser(origin: &str, out: &PathBuf, machines: &[String]) -> Value {
    let script = repo_root().join("tests/browser/storefront.mjs");
    assert!(
        repo_root()
            .join("tests/browser/node_modules/playwright-core")
            .exists()
            && std::path::Path::new(CHROMIUM).exists(),
        "chromium or playwright-core missing: run scripts/install-test-tools"
    );
    let output = tokio::process::Command::new("node")
        .arg(script)
        .args(["--origin", origin, "--out"])
        .arg(out)
        .args(["--machines", &machines.join(",")])
        .args(["--screenshot-machine", SCREENSHOT_MACHINE])
        .args(["--chromium", CHROMIUM])
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs (scripts/install-test-tools installs it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    let Some(line) = line else {
        panic!(
            "the browser driver printed no result (exit {:?}):\n{stdout}\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    serde_json::from_str(line).expect("one JSON line")
}

/// The terms of the 402 the server answers to the page's example body, decoded from the header.
async fn server_terms(server: &TestServer, id: &str) -> Value {
    let m = machine(id);
    let response = server
        .post_json(m["path"].as_str().expect("path"), &m["input_example"])
        .await;
    assert_eq!(response.status().as_u16(), 402, "{id} example gets a 402");
    let header = response.headers()["payment-required"]
        .to_str()
        .expect("ascii")
        .to_string();
    decode_header(&header)["accepts"][0].clone()
}

fn as_strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().map(|v| v.to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_storefront_page_works_in_headless_chromium() {
    let server = TestServer::start().await;
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("storefront-browser");
    let _ = std::fs::remove_dir_all(&out);
    let machines = machine_ids();
    let result = run_browser(&server.url, &out, &machines).await;

    assert_eq!(
        as_strings(&result["off_loopback"]),
        Vec::<String>::new(),
        "requests or links that would leave loopback"
    );
    let pages = result["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), machines.len() + 1, "index and every machine");
    for page in pages {
        let path = page["path"].as_str().expect("path");
        assert_eq!(page["status"], 200, "{path}");
        assert_eq!(
            page["content_encoding"], "br",
            "{path}: chromium got brotli"
        );
        for field in ["console_errors", "page_errors", "failed_requests"] {
            assert_eq!(
                as_strings(&page[field]),
                Vec::<String>::new(),
                "{path}: {field}"
            );
        }
        let links = page["links"].as_array().expect("links");
        assert!(links.len() >= 5, "{path} has its links");
        for link in links {
            assert_eq!(link["status"], 200, "{path}: link {}", link["href"]);
        }
    }
    assert!(
        pages[0]["h1"]
            .as_str()
            .is_some_and(|h| h.starts_with("factomat")),
        "index heading"
    );

    for (page, id) in pages[1..].iter().zip(&machines) {
        let m = machine(id);
        assert_eq!(page["path"], format!("/storefront/{id}"));
        assert_eq!(
            page["h1"],
            format!("{id} — {}", m["name"].as_str().expect("name"))
        );
        assert_eq!(
            page["button_visible"], true,
            "{id}: button shown with JS on"
        );
        let shown = &page["terms"];
        assert_eq!(shown["problem"], Value::Null, "{id}: {shown}");
        let expected = server_terms(&server, id).await;
        for field in ["amount", "asset", "network", "payTo", "scheme"] {
            assert_eq!(
                shown[field].as_str(),
                expected[field].as_str(),
                "{id}: {field} on the page equals the 402's"
            );
        }
        // The only console error after the click is Chromium's note of the expected 402.
        for entry in page["button_console_errors"].as_array().expect("list") {
            assert!(
                entry["text"].as_str().is_some_and(|t| t.contains("402"))
                    && entry["url"]
                        .as_str()
                        .is_some_and(|u| u.ends_with(m["path"].as_str().expect("path"))),
                "{id}: unexpected console error after the click: {entry}"
            );
        }
    }

    let js_off = &result["js_off"];
    assert_eq!(js_off["status"], 200);
    assert_eq!(
        js_off["button_visible"], false,
        "the button needs JavaScript"
    );
    assert!(js_off["schema_rows"].as_u64().unwrap_or(0) >= 1);
    assert!(js_off["snippets"].as_u64().unwrap_or(0) >= 3);

    for shot in as_strings(&result["screenshots"]) {
        let path = shot.trim_matches('"');
        let bytes = std::fs::read(path).expect("screenshot written");
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{path} is a real PNG"
        );
    }
    assert_eq!(server.outbound(), 0, "the storefront did no provider work");
}
