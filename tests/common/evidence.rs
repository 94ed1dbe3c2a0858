//! Signed-evidence harness: key files, a server that signs, and the two outside verifiers
//! (the official `@x402/extensions` in node, PyJWT in the test venv).

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use super::{ALL_PROVIDERS, PAY_TO, TestServer, repo_root, temp_path};

/// A new evidence signing key file, written by the engine's own `keys generate`.
pub fn key_file(name: &str) -> PathBuf {
    let path = temp_path(name);
    factomat::evidence::generate_key_file(&path).expect("key written");
    path
}

/// A server with a payee, every machine's providers, and these signing keys (the first
/// signs); the base URL is the server's own address unless given, so its did:web resolves
/// over loopback.
pub async fn signing_server(keys: &[&Path], extra: &[(&str, &str)]) -> TestServer {
    let files = keys
        .iter()
        .map(|k| k.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut env = vec![
        ("FACTOMAT_PAY_TO", PAY_TO),
        ("FACTOMAT_EVIDENCE_SIGNING_KEY_FILE", files.as_str()),
    ];
    env.extend_from_slice(ALL_PROVIDERS);
    env.extend_from_slice(extra);
    TestServer::with_env(&env).await
}

/// The same JWS with `from` replaced by `to` in its payload text and the signature kept.
pub fn tampered(jws: &str, from: &str, to: &str) -> String {
    let parts: Vec<&str> = jws.split('.').collect();
    let payload =
        String::from_utf8(URL_SAFE_NO_PAD.decode(parts[1]).expect("base64url")).expect("utf-8");
    assert!(payload.contains(from), "{from} is not in {payload}");
    let edited = URL_SAFE_NO_PAD.encode(payload.replacen(from, to, 1));
    format!("{}.{edited}.{}", parts[0], parts[2])
}

fn run_json(command: &mut Command, what: &str) -> Value {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{what}: {e}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// `devstack/verify-evidence.mjs`: the official offer-and-receipt verification.
pub fn official_verify(input: &Value) -> Value {
    let file = temp_path("official-input.json");
    std::fs::write(&file, input.to_string()).expect("input written");
    run_json(
        Command::new("node")
            .arg(repo_root().join("devstack/verify-evidence.mjs"))
            .arg(&file)
            .current_dir(repo_root()),
        "node devstack/verify-evidence.mjs",
    )
}

/// `tests/evidence/verify_pyjwt.py`: PyJWT's verification of each `{jws, body}` item.
pub fn pyjwt_verify(did_document: &Value, items: &[Value]) -> Vec<Value> {
    let file = temp_path("pyjwt-input.json");
    let task = serde_json::json!({"did_document": did_document, "items": items});
    std::fs::write(&file, task.to_string()).expect("input written");
    let results = run_json(
        Command::new(repo_root().join(".tools/venv/bin/python"))
            .arg(repo_root().join("tests/evidence/verify_pyjwt.py"))
            .arg(&file),
        "tests/evidence/verify_pyjwt.py (run scripts/install-test-tools)",
    );
    results.as_array().expect("results").clone()
}
