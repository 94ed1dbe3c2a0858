//! The loopback CDP-style facilitator (devstack/cdp-facilitator.mjs): throwaway API keys,
//! tokens minted by the official CDP SDK, and the verifying proxy in front of the dev stack's
//! official facilitator.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{repo_root, temp_path};

fn script() -> PathBuf {
    repo_root().join("devstack/cdp-facilitator.mjs")
}

fn run(args: &[&str]) -> Value {
    let output = Command::new("node")
        .arg(script())
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "cdp-facilitator.mjs {:?}: {}",
        args.first(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON line")
}

/// A throwaway key pair of one algorithm: the secret as factomat and the SDK read it, the
/// public key as the verifier reads it.
#[derive(Clone)]
pub struct ApiKey {
    pub key_id: String,
    pub secret: String,
    pub secret_file: PathBuf,
    pub public_file: PathBuf,
}

/// Fresh ES256 (PKCS#8), ES256 (SEC1 PEM of the same key) and EdDSA keys.
pub fn keys() -> (ApiKey, ApiKey, ApiKey) {
    let all = run(&["keys"]);
    let key_id = all["key_id"].as_str().expect("key id").to_string();
    let make = |secret: &Value, public: &Value| {
        let secret = secret.as_str().expect("secret").to_string();
        let secret_file = temp_path("cdp-secret");
        std::fs::write(&secret_file, &secret).expect("write");
        let public_file = temp_path("cdp-public.pem");
        std::fs::write(&public_file, public.as_str().expect("public")).expect("write");
        ApiKey {
            key_id: key_id.clone(),
            secret,
            secret_file,
            public_file,
        }
    };
    (
        make(&all["es256"]["secret"], &all["es256"]["public"]),
        make(&all["es256"]["sec1_secret"], &all["es256"]["public"]),
        make(&all["eddsa"]["secret"], &all["eddsa"]["public"]),
    )
}

/// A token minted by the official `@coinbase/cdp-sdk` `generateJwt`.
pub fn sdk_token(
    key: &ApiKey,
    method: &str,
    host: &str,
    path: &str,
    expires_in: Option<u64>,
) -> String {
    let secret_file = key.secret_file.display().to_string();
    let expires = expires_in.map(|s| s.to_string());
    let mut args = vec![
        "jwt",
        "--key-id",
        key.key_id.as_str(),
        "--secret-file",
        secret_file.as_str(),
        "--method",
        method,
        "--host",
        host,
        "--path",
        path,
    ];
    if let Some(expires) = &expires {
        args.extend(["--expires-in", expires.as_str()]);
    }
    run(&args)["token"].as_str().expect("token").to_string()
}

/// The verifying facilitator; stopped when dropped.
pub struct CdpFacilitator {
    child: Child,
    /// `http://127.0.0.1:PORT/platform/v2/x402`
    pub url: String,
}

impl CdpFacilitator {
    pub fn start(key: &ApiKey, upstream: &str) -> CdpFacilitator {
        let mut child = Command::new("node")
            .arg(script())
            .args(["serve", "--upstream", upstream, "--key-id", &key.key_id])
            .arg("--public-key-file")
            .arg(&key.public_file)
            .current_dir(repo_root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node runs");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        let ready: Value = serde_json::from_str(&line).expect("JSON line");
        CdpFacilitator {
            child,
            url: ready["url"].as_str().expect("url").to_string(),
        }
    }

    /// `127.0.0.1:PORT`, the host a token's uri names.
    pub fn host(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .expect("host")
            .to_string()
    }

    /// `{accepted, rejected: {reason: count}}`
    pub async fn stats(&self) -> Value {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client")
            .get(format!("http://{}/_verifier", self.host()))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("json")
    }
}

impl Drop for CdpFacilitator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
