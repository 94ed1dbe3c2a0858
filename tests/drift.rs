//! The committed renders under generated/ and docs/machines/ must equal what the build
//! renders from machines.yaml.

mod common;

use std::collections::BTreeSet;

use common::repo_root;
use factomat::catalog::embedded::RENDERS;

const REFRESH: &str = "cargo run -- generate";

#[test]
fn committed_renders_match_the_build() {
    let mut drifted = Vec::new();
    for (path, content) in RENDERS {
        let committed = std::fs::read_to_string(repo_root().join(path)).unwrap_or_default();
        if committed != *content {
            drifted.push(*path);
        }
    }
    assert!(
        drifted.is_empty(),
        "renders drifted from machines.yaml: {drifted:?}\nrefresh them with: {REFRESH}"
    );
}

#[test]
fn no_stale_files_linger_beside_the_renders() {
    let rendered: BTreeSet<String> = RENDERS.iter().map(|(p, _)| p.to_string()).collect();
    let mut stale = Vec::new();
    for dir in [
        "generated",
        "generated/schemas",
        "generated/samples",
        "generated/storefront",
        "docs/machines",
    ] {
        for entry in std::fs::read_dir(repo_root().join(dir)).expect("render folder") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("type").is_file() {
                let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
                if !rendered.contains(&path) {
                    stale.push(path);
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "files not produced by the build: {stale:?}; delete them and run {REFRESH}"
    );
}

#[test]
fn generated_files_say_so_at_the_top() {
    for (path, content) in RENDERS {
        if path.ends_with(".md") {
            assert!(
                content.starts_with("<!-- Generated from machines.yaml"),
                "{path}"
            );
        }
    }
    let openapi: serde_json::Value = serde_json::from_str(
        factomat::catalog::embedded::render("generated/openapi.json").expect("openapi"),
    )
    .expect("json");
    assert_eq!(openapi["info"]["x-generated-from"], "machines.yaml");
}
