//! What indexes, agents' tools and operators' proxies see of the service, checked with their
//! own software on loopback: x402scan's discovery checker (`@agentcash/discovery`), a default
//! Debian nginx in front of the service with the official x402 client behind it, and
//! schemathesis against the published OpenAPI document.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::devstack::DevStack;
use common::{ALL_PROVIDERS, TestServer, machine_routes, manifest, repo_root, temp_path};
use serde_json::{Value, json};

fn tool(relative: &str) -> PathBuf {
    let path = repo_root().join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-test-tools",
        path.display()
    );
    path
}

// ---------------------------------------------------------------------------------------
// @agentcash/discovery

fn discovery(args: &[&str]) -> Value {
    let output = Command::new("node")
        .arg(tool(
            "scripts/test-tools/node_modules/@agentcash/discovery/bin/discovery.js",
        ))
        .args(args)
        .arg("--json")
        .output()
        .expect("node runs the discovery checker");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "discovery {args:?} printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discovery_checker_finds_every_route_with_no_warning_or_notice() {
    let server = TestServer::start().await;
    let found = discovery(&["discover", &server.url]);
    assert_eq!(found["ok"], true, "{found}");
    assert_eq!(
        found["warnings"],
        json!([]),
        "discover: {}",
        found["warnings"]
    );
    let resources = found["resources"].as_array().expect("resources");
    for (id, path, _) in machine_routes() {
        let resource = resources
            .iter()
            .find(|r| r["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{id} not discovered"));
        assert_eq!(resource["authHint"], "paid", "{id}");
        assert_eq!(resource["protocols"], json!(["x402"]), "{id}");
        let checked = discovery(&["check", &format!("{}{path}", server.url)]);
        assert_eq!(checked["found"], true, "{id}: {checked}");
        assert_eq!(
            checked["warnings"],
            json!([]),
            "{id}: {}",
            checked["warnings"]
        );
        let advisory = &checked["advisories"][0];
        assert_eq!(advisory["authMode"], "paid", "{id}");
        assert!(advisory["inputSchema"].is_object(), "{id}: input schema");
    }
    for free in resources.iter().filter(|r| r["authHint"] != "paid") {
        assert_eq!(free["authHint"], "unprotected", "{free}");
    }
    assert_eq!(server.outbound(), 0);
}

// ---------------------------------------------------------------------------------------
// A default Debian nginx in front

/// nginx as Debian ships it, proxying to the service with `proxy_pass` and no buffer tuning,
/// listening on loopback only; stopped when dropped. Its one setting is the read timeout
/// docs/operations.md asks for: above the longest paid call (the 70 s drain).
struct Nginx {
    child: Child,
    url: String,
    dir: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn nginx_binary() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

impl Nginx {
    fn start(upstream: &str) -> Nginx {
        let dir = temp_path("nginx").with_file_name("nginx");
        std::fs::create_dir_all(&dir).expect("nginx dir");
        // Workers drop root to `nobody` and write their temp files here.
        let _ = Command::new("chmod").arg("0777").arg(&dir).status();
        let port = free_port();
        let d = dir.display();
        let upstream = upstream.trim_start_matches("http://");
        let config = format!(
            "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               server {{\n    listen 127.0.0.1:{port};\n    location / {{ proxy_pass http://{upstream}; proxy_read_timeout 90s; }}\n  }}\n}}\n"
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config).expect("nginx.conf");
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts (run scripts/install-test-tools)");
        let nginx = Nginx {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen: {}",
                nginx.errors()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        nginx
    }

    fn errors(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    /// `nginx -s stop` (SIGTERM to the master through its pid file): the master stops its
    /// workers before it exits. A SIGKILL to the master alone left orphaned workers behind.
    fn drop(&mut self) {
        let stopped = Command::new(nginx_binary())
            .arg("-p")
            .arg(&self.dir)
            .arg("-e")
            .arg(self.dir.join("error.log"))
            .arg("-c")
            .arg(self.dir.join("nginx.conf"))
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        let deadline = Instant::now() + Duration::from_secs(5);
        while stopped && Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The official client's decoding (and offline signing) of each unpaid call's 402.
fn decode_402s(requests: &Value) -> Vec<Value> {
    let output = Command::new("node")
        .arg(repo_root().join("devstack/decode402.mjs"))
        .arg("--requests")
        .arg(requests.to_string())
        .current_dir(repo_root())
        .output()
        .expect("node runs decode402.mjs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "decode402.mjs: {e}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    answer["results"].as_array().expect("results").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_default_nginx_every_402_decodes_and_a_paid_call_settles() {
    let stack = DevStack::start();
    let pay_to = stack.field("pay_to");
    let facilitator_url = stack.field("facilitator_url");
    let rpc_url = stack.field("rpc_url");
    // Every machine must be for sale (a machine without providers answers 503, not 402); the
    // Base RPC is the dev stack's, for the paid call.
    let mut env: Vec<(&str, &str)> = ALL_PROVIDERS
        .iter()
        .copied()
        .filter(|(key, _)| *key != "FACTOMAT_RPC_URL_EIP155_8453")
        .collect();
    // Signing on: every 402 carries its signed offer (in the body) and the paid answer its
    // receipt and seal through the proxy too.
    let key = common::evidence::key_file("evidence.pem")
        .display()
        .to_string();
    env.extend([
        ("FACTOMAT_PAY_TO", pay_to.as_str()),
        ("FACTOMAT_FACILITATOR_URL", facilitator_url.as_str()),
        ("FACTOMAT_RPC_URL_EIP155_8453", rpc_url.as_str()),
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
        ("FACTOMAT_EVIDENCE_SIGNING_KEY_FILE", key.as_str()),
    ]);
    let server = TestServer::with_env(&env).await;
    let nginx = Nginx::start(&server.url);

    let requests: Vec<Value> = machine_routes()
        .iter()
        .map(|(_, path, body)| json!({"url": format!("{}{path}", nginx.url), "body": body}))
        .collect();
    let results = decode_402s(&Value::Array(requests));
    let catalog = manifest();
    for ((id, _, _), result) in machine_routes().iter().zip(&results) {
        assert_eq!(result["status"], 402, "{id} through nginx: {result}");
        assert_eq!(result["error"], Value::Null, "{id}: {result}");
        assert_eq!(result["signed"], true, "{id}: the client signs for it");
        let accept = &result["decoded"]["accepts"][0];
        let price = catalog["machines"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["machine"] == id.as_str()))
            .map(|m| m["price_atomic"].clone())
            .expect("price");
        assert_eq!(accept["amount"], price, "{id}");
        assert_eq!(accept["payTo"], pay_to.as_str(), "{id}");
        assert!(
            result["decoded"]["extensions"]["bazaar"]["schema"]["properties"]["input"].is_object(),
            "{id}: the header keeps an input schema"
        );
        assert!(
            result["decoded"]["extensions"]
                .get("offer-receipt")
                .is_none(),
            "{id}: the signed offer rides in the 402 body, beyond its header allotment"
        );
    }
    assert!(
        !nginx.errors().contains("too big header"),
        "{}",
        nginx.errors()
    );

    let before = stack.usdc_balance(&pay_to);
    let body = json!({
        "owner": stack.field("buyer_address"),
        "token": stack.field("usdc"),
        "spender": pay_to,
    });
    let answer = stack.pay(&format!("{}/v1/allowance-exposure", nginx.url), &body);
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["payment_response"]["success"], true, "{answer}");
    sealed_answer_verifies(&server, &answer).await;
    let after = stack.usdc_balance(&pay_to);
    let gained = after.parse::<u128>().expect("balance") - before.parse::<u128>().expect("balance");
    assert_eq!(gained, 10_000, "the payee received the price once");
}

/// The paid answer (through nginx) carries its receipt, seal and Content-Digest over the
/// body as received, and the official implementation and our verifier accept them.
async fn sealed_answer_verifies(server: &TestServer, answer: &Value) {
    let headers = &answer["headers"];
    assert_eq!(
        headers["cache-control"], "private, no-transform",
        "{answer}"
    );
    let seal = headers["evidence-seal"].as_str().expect("Evidence-Seal");
    let body = answer["body_text"].as_str().expect("body text");
    assert_eq!(
        headers["content-digest"].as_str(),
        Some(factomat::evidence::content_digest(body.as_bytes()).as_str())
    );
    let document: Value = server.get_json("/.well-known/did.json").await;
    let document = factomat::evidence::DidDocument::parse(&document).expect("document");
    let verified = factomat::evidence::verify_seal(seal, body.as_bytes(), &document)
        .expect("the seal verifies");
    assert_eq!(verified.payload["machine"], "VM02");
    assert_eq!(
        verified.payload["transaction"],
        answer["payment_response"]["transaction"]
    );
    let official = common::evidence::official_verify(&json!({
        "receipts": [headers["payment-response"]],
    }));
    let receipt = &official["receipts"][0];
    assert_eq!(receipt["error"], Value::Null, "{receipt}");
    assert_eq!(receipt["payload"]["payer"], verified.payload["payer"]);
    assert_eq!(
        receipt["payload"]["transaction"],
        verified.payload["transaction"]
    );
}

// ---------------------------------------------------------------------------------------
// schemathesis against the published OpenAPI document

/// The 400 codes of rules JSON Schema cannot state (docs/decisions.md, "Rules the request
/// schemas cannot state"): a schema-valid request may still be refused with one of these.
const INEXPRESSIBLE: [&str; 11] = [
    "invalid_address_checksum",
    "uint256_out_of_range",
    "baseline_tampered",
    "baseline_foreign",
    "baseline_not_reusable",
    "baseline_request_mismatch",
    "invalid_price_policy",
    "declared_holding_chain_not_requested",
    "invalid_query",
    "duplicate_query",
    "url_*",
];

fn inexpressible(code: &str) -> bool {
    INEXPRESSIBLE
        .iter()
        .any(|rule| match rule.strip_suffix('*') {
            Some(prefix) => code.starts_with(prefix),
            None => code == *rule,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_error_and_no_valid_request_refused_for_an_unstated_rule() {
    let server = TestServer::start().await;
    let reports = temp_path("schemathesis");
    let har = reports.with_extension("har.json");
    let output = Command::new(tool(".tools/venv/bin/schemathesis"))
        .arg("run")
        .arg(format!("{}/openapi.json", server.url))
        .args(["--url", &server.url])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance,response_headers_conformance",
        ])
        .args([
            "--max-examples",
            "25",
            "--workers",
            "1",
            "--generation-deterministic",
        ])
        .args(["--request-timeout", "20", "--report", "har"])
        .arg("--report-har-path")
        .arg(&har)
        .env("NO_COLOR", "1")
        .current_dir(reports.parent().expect("temp dir"))
        .output()
        .expect("schemathesis runs");
    let log = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "schemathesis failed:\n{log}");

    let validators: Vec<(String, jsonschema::Validator)> = manifest()["machines"]
        .as_array()
        .expect("machines")
        .iter()
        .map(|m| {
            let validator = factomat::catalog::compile_schema(&m["input_schema"])
                .expect("input schema compiles");
            (m["path"].as_str().expect("path").to_string(), validator)
        })
        .collect();
    let har: Value =
        serde_json::from_slice(&std::fs::read(&har).expect("HAR written")).expect("HAR is JSON");
    let entries = har["log"]["entries"].as_array().expect("entries");
    let (mut valid_bodies, mut refused) = (0, Vec::new());
    for entry in entries {
        let status = entry["response"]["status"].as_u64().expect("status");
        assert!(status < 500, "server error: {entry}");
        let url = entry["request"]["url"].as_str().expect("url");
        let path = url
            .trim_start_matches(&server.url)
            .split('?')
            .next()
            .unwrap_or("");
        let Some((_, validator)) = validators.iter().find(|(p, _)| p == path) else {
            continue;
        };
        let body = entry["request"]["postData"]["text"].as_str().unwrap_or("");
        let Ok(body) = serde_json::from_str::<Value>(body) else {
            continue;
        };
        let json_content = entry["request"]["headers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|h| {
                h["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case("content-type"))
                    && h["value"]
                        .as_str()
                        .is_some_and(|v| v.starts_with("application/json"))
            });
        if entry["request"]["method"] != "POST" || !json_content || !validator.is_valid(&body) {
            continue;
        }
        valid_bodies += 1;
        if status == 400 {
            let answer: Value =
                serde_json::from_str(entry["response"]["content"]["text"].as_str().unwrap_or(""))
                    .expect("a 400 has a JSON error body");
            let code = answer["error"]["code"].as_str().unwrap_or("").to_string();
            if !inexpressible(&code) {
                refused.push(format!("{path} {code}: {body}"));
            }
        } else {
            assert_eq!(
                status, 402,
                "{path}: a valid unpaid request gets the 402: {body}"
            );
        }
    }
    assert!(
        valid_bodies >= 50,
        "only {valid_bodies} schema-valid requests were generated"
    );
    assert!(
        refused.is_empty(),
        "schema-valid requests refused for a rule the schema could state:\n{}",
        refused.join("\n")
    );
    assert_eq!(server.outbound(), 0);
}
