//! The README documents every configuration key, and CI runs the README's test command.

mod common;

use common::repo_root;
use factomat::config::KEYS;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_configuration_key_is_in_the_readme_table() {
    let readme = read("README.md");
    for (key, variable, _, _) in KEYS {
        let row = format!("| `{variable}` | `{key}` |");
        assert!(
            readme.contains(&row),
            "README lacks the configuration row {row}"
        );
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = read("README.md");
    assert!(
        readme.contains("scripts/test"),
        "README names the test command"
    );
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == "scripts/test"),
        ".ci/run calls scripts/test"
    );
}

#[test]
fn documents_linked_from_the_readme_exist() {
    let readme = read("README.md");
    for link in readme.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        if target.starts_with("http") || target.starts_with('#') {
            continue;
        }
        assert!(
            repo_root().join(target).exists(),
            "README links to missing {target}"
        );
    }
}
