//! The offline x402 dev stack (anvil + our EIP-3009 USDC + the official facilitator) and the
//! official client, driven from tests through the scripts in devstack/.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr as _;
use std::sync::LazyLock;

use serde_json::Value;

use super::{repo_root, temp_path};

/// A running stack, stopped when dropped.
pub struct DevStack {
    pub state_path: PathBuf,
    pub state: Value,
}

/// Runs one devstack/ node script and returns the last JSON line it printed.
pub fn run_node(script: &str, args: &[&str]) -> Value {
    node(script, args)
}

/// The official declaration of the payment-identifier extension in a 402 (`{info: {required:
/// false}, schema}`), from `@x402/extensions` (devstack/pay.mjs --declaration).
pub fn payment_identifier_declaration() -> Value {
    node("pay.mjs", &["--declaration"])["declaration"].clone()
}

/// 32 unpredictable bytes as 0x-hex (a private key, a nonce, a transaction hash that exists
/// nowhere): keccak-256 of the time, the process id and a counter.
pub fn random_hex32() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let seed = format!("{nanos}-{}-{n}", std::process::id());
    alloy::primitives::hex::encode_prefixed(alloy::primitives::keccak256(seed.as_bytes()))
}

/// A fresh address nobody else pays: a payee whose balance moves only with one test's
/// payments, on a stack other tests share.
pub fn fresh_payee() -> String {
    let bytes = alloy::primitives::B256::from_str(&random_hex32()).expect("32 bytes of hex");
    alloy::primitives::Address::from_word(bytes).to_checksum(None)
}

/// Serializes the chain.mjs runs that send transactions within a test binary: each sends
/// from the same admin account (or a fixed `--from-key`), and two processes picking the
/// account's next nonce at once would collide.
static ADMIN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The chain.mjs commands that only read, which need not wait for the admin account.
const CHAIN_READS: [&str; 5] = ["balance", "allowance", "auth-state", "block", "receipt"];

/// A chain.mjs run's command: the first argument after its leading options (`--state`,
/// `--chain-id`, `--rpc-url`), each of which takes a value.
fn chain_command<'a>(args: &[&'a str]) -> Option<&'a str> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if !arg.starts_with("--") {
            return Some(arg);
        }
        rest.next();
    }
    None
}

fn node(script: &str, args: &[&str]) -> Value {
    let reads = chain_command(args).is_some_and(|command| CHAIN_READS.contains(&command));
    let sends = script == "chain.mjs" && !reads;
    let _admin = sends.then(|| ADMIN.lock().unwrap_or_else(|e| e.into_inner()));
    one_json_line("node", script, args)
}

/// The venv's Python (scripts/install-test-tools makes it).
fn python() -> String {
    repo_root()
        .join(".tools/venv/bin/python")
        .display()
        .to_string()
}

/// Runs `program devstack/<script> args` and parses the last line of stdout that is JSON.
fn one_json_line(program: &str, script: &str, args: &[&str]) -> Value {
    let output = Command::new(program)
        .arg(repo_root().join("devstack").join(script))
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| {
            panic!("{program} {script}: {e} (is it installed? run scripts/install-test-tools)")
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| {
            panic!(
                "{program} {script} {args:?} printed no JSON (exit {:?}): {}\n{}",
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

    /// The stack started with extra `start.mjs` options, e.g. `&["--block-time", "2"]`.
    pub fn start_with(options: &[&str]) -> DevStack {
        DevStack::launch(options)
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

    /// The PAYMENT-SIGNATURE header value of [`DevStack::sign`].
    pub fn payment_header(&self, required: &str, mutations: &[&str]) -> String {
        header_of(&self.sign(required, mutations))
    }

    /// The PAYMENT-SIGNATURE header value of [`DevStack::sign_as`].
    pub fn payment_header_as(&self, buyer: &Buyer, required: &str, mutations: &[&str]) -> String {
        header_of(&self.sign_as(buyer, required, mutations))
    }

    /// Deploys an ERC-20 on the Base node; its address.
    pub fn deploy_erc20(&self, name: &str, symbol: &str, decimals: &str) -> String {
        self.chain(&["deploy-erc20", name, symbol, decimals])["address"]
            .as_str()
            .expect("token address")
            .to_string()
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

    /// The stack's own funded buyer: for a test with a stack of its own (a shared stack's
    /// tests take a [`DevStack::fresh_buyer`] each).
    pub fn buyer(&self) -> Buyer {
        Buyer {
            key: self.field("buyer_private_key"),
            address: self.field("buyer_address"),
        }
    }

    /// A fresh buyer: a random key holding `usdc_atomic` USDC (and no ETH), so that tests
    /// sharing one stack never share nonces or balances.
    pub fn fresh_buyer(&self, usdc_atomic: &str) -> Buyer {
        let made = self.chain(&["new-buyer", usdc_atomic]);
        Buyer {
            key: made["key"].as_str().expect("key").to_string(),
            address: made["address"].as_str().expect("address").to_string(),
        }
    }

    /// The official client (`@x402/fetch`) making one paid call as `buyer`.
    pub fn pay_as(&self, buyer: &Buyer, url: &str, body: &Value) -> Value {
        self.pay_with(buyer, url, body, &[])
    }

    /// The official client (`@x402/fetch`) making one paid call as `buyer`, with more pay.mjs
    /// options (`--payment-id ID|auto` makes the payment carry a payment-identifier `id`, the
    /// output's `id`; `--timeout-ms N` cuts the call).
    pub fn pay_with(&self, buyer: &Buyer, url: &str, body: &Value, options: &[&str]) -> Value {
        let (body, state) = (body.to_string(), self.state_arg());
        let mut args = vec!["--url", url, "--body", &body, "--key", &buyer.key];
        args.extend(["--state", &state]);
        args.extend_from_slice(options);
        node("pay.mjs", &args)
    }

    /// The official Python client (PyPI `x402`, devstack/pay.py) making one paid call as the
    /// state's buyer; the same output as [`DevStack::pay`].
    pub fn pay_python(&self, url: &str, body: &Value) -> Value {
        let key = self.field("buyer_private_key");
        let address = self.field("buyer_address");
        self.pay_python_as(&Buyer { key, address }, url, body)
    }

    /// The official Python client making one paid call as `buyer`.
    pub fn pay_python_as(&self, buyer: &Buyer, url: &str, body: &Value) -> Value {
        let body = body.to_string();
        one_json_line(
            &python(),
            "pay.py",
            &[
                "--url",
                url,
                "--body",
                &body,
                "--key",
                &buyer.key,
                "--state",
                &self.state_arg(),
            ],
        )
    }

    /// A PAYMENT-SIGNATURE signed by `buyer`, optionally deliberately wrong.
    pub fn sign_as(&self, buyer: &Buyer, required: &str, mutations: &[&str]) -> Value {
        let mut args = vec!["--key", buyer.key.as_str()];
        args.extend_from_slice(mutations);
        self.sign(required, &args)
    }

    pub fn usdc_balance(&self, address: &str) -> String {
        let answer = self.chain(&["balance", "usdc", address]);
        answer["balance"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| answer["balance"].to_string())
    }
}

/// The header value in sign.mjs's output.
fn header_of(signed: &Value) -> String {
    signed["header"]
        .as_str()
        .expect("sign.mjs gives a header")
        .to_string()
}

/// A buyer of a shared stack (see [`DevStack::fresh_buyer`]).
#[derive(Clone, Debug)]
pub struct Buyer {
    pub key: String,
    pub address: String,
}

static SHARED: LazyLock<DevStack> = LazyLock::new(|| DevStack::start().kept_until_exit());

/// One dev stack for the whole test binary, started on first use and stopped when the binary
/// exits (a static is never dropped, so a watchdog process does it). Give each test its own
/// buyer with [`DevStack::fresh_buyer`]; do not warp the shared anvil's clock.
pub fn shared_stack() -> &'static DevStack {
    &SHARED
}

static SHARED_WITH_MAINNET: LazyLock<DevStack> =
    LazyLock::new(|| DevStack::start_with_mainnet().kept_until_exit());

/// [`shared_stack`] with the second anvil (chain id 1) as well: one per test binary, under
/// the same rules (a fresh buyer per test, the clocks left alone).
pub fn shared_stack_with_mainnet() -> &'static DevStack {
    &SHARED_WITH_MAINNET
}

impl DevStack {
    /// The stack, stopped by devstack/watchdog.mjs once this test process has exited (a
    /// static is never dropped).
    fn kept_until_exit(self) -> DevStack {
        self.stop_with_this_process();
        self
    }

    /// Spawns devstack/watchdog.mjs, which stops this stack's processes once this test
    /// process has exited.
    fn stop_with_this_process(&self) {
        let pids: Vec<String> = self.state["pids"]
            .as_object()
            .expect("state.pids")
            .values()
            .map(|p| p.to_string())
            .collect();
        let mut watchdog = Command::new("node")
            .arg(repo_root().join("devstack/watchdog.mjs"))
            .args(["--parent", &std::process::id().to_string()])
            .args(["--pids", &pids.join(",")])
            .arg("--state")
            .arg(&self.state_path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("watchdog starts");
        // It outlives this process on purpose; reap it if it ends first.
        std::thread::spawn(move || watchdog.wait());
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
