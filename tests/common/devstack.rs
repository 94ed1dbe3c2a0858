//! The offline x402 dev stack (anvil + our EIP-3009 USDC + the official facilitator) and the
//! official client, driven from tests through the scripts in devstack/.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{repo_root, temp_path};

/// A running stack, stopped when dropped.
pub struct DevStack {
    pub state_path: PathBuf,
    pub state: Value,
}

fn node(script: &str, args: &[&str]) -> Value {
    let output = Command::new("node")
        .arg(repo_root().join("devstack").join(script))
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| {
            panic!("node {script}: {e} (is node installed? run scripts/install-test-tools)")
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| {
            panic!(
                "node {script} {args:?} printed no JSON (exit {:?}): {}\n{}",
                output.status.code(),
                stdout,
                String::from_utf8_lossy(&output.stderr)
            )
        });
    serde_json::from_str(line).expect("one JSON line")
}

impl DevStack {
    pub fn start() -> DevStack {
        DevStack::launch(&[])
    }

    /// The stack plus a second anvil with chain id 1 (`rpc_url_eip155_1` in the state).
    pub fn start_with_mainnet() -> DevStack {
        DevStack::launch(&["--mainnet-anvil"])
    }

    fn launch(extra: &[&str]) -> DevStack {
        let anvil =
            repo_root().join("devstack/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
        assert!(
            anvil.exists(),
            "devstack is not installed: run scripts/install-test-tools"
        );
        let state_path = temp_path("devstack-state.json");
        let status = Command::new("node")
            .arg(repo_root().join("devstack/start.mjs"))
            .args(["--quiet", "--state"])
            .arg(&state_path)
            .args(extra)
            .current_dir(repo_root())
            .status()
            .expect("start.mjs runs");
        assert!(status.success(), "dev stack failed to start");
        let state =
            serde_json::from_str(&std::fs::read_to_string(&state_path).expect("state file"))
                .expect("state JSON");
        DevStack { state_path, state }
    }

    fn state_arg(&self) -> String {
        self.state_path.display().to_string()
    }

    pub fn field(&self, name: &str) -> String {
        self.state[name]
            .as_str()
            .unwrap_or_else(|| panic!("state.{name}"))
            .to_string()
    }

    /// The official client (`@x402/fetch`) making one paid call.
    pub fn pay(&self, url: &str, body: &Value) -> Value {
        let body = body.to_string();
        node(
            "pay.mjs",
            &["--url", url, "--body", &body, "--state", &self.state_arg()],
        )
    }

    /// A PAYMENT-SIGNATURE for a PAYMENT-REQUIRED, optionally deliberately wrong.
    pub fn sign(&self, required: &str, mutations: &[&str]) -> Value {
        let state = self.state_arg();
        let mut args = vec!["--required", required, "--state", state.as_str()];
        args.extend_from_slice(mutations);
        node("sign.mjs", &args)
    }

    /// A chain.mjs command against this stack's anvil.
    pub fn chain(&self, args: &[&str]) -> Value {
        let state = self.state_arg();
        let mut all = vec!["--state", state.as_str()];
        all.extend_from_slice(args);
        node("chain.mjs", &all)
    }

    /// A chain.mjs command against the chain-1 anvil (start_with_mainnet).
    pub fn chain_mainnet(&self, args: &[&str]) -> Value {
        let state = self.state_arg();
        let mut all = vec!["--state", state.as_str(), "--chain-id", "1"];
        all.extend_from_slice(args);
        node("chain.mjs", &all)
    }

    pub fn usdc_balance(&self, address: &str) -> String {
        let answer = self.chain(&["balance", "usdc", address]);
        answer["balance"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| answer["balance"].to_string())
    }
}

impl Drop for DevStack {
    fn drop(&mut self) {
        let _ = Command::new("node")
            .arg(repo_root().join("devstack/stop.mjs"))
            .arg("--state")
            .arg(&self.state_path)
            .output();
    }
}
