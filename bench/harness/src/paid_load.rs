//! Closed-loop load on factomat's paid path: N payers, each sending one request after the
//! other on its own keep-alive connection, each request carrying a PAYMENT-SIGNATURE with a
//! fresh EIP-3009 nonce whose `accepted` is factomat's own requirement (read from its 402).
//! Each authorization is signed (EIP-712 under the domain the 402 names, anvil's well-known
//! test key #1), so factomat's local signature check runs as for a real buyer; the benchmark's
//! facilitator stub then accepts every payment.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::BenchError;

/// anvil's test account #1 (a published development key that holds nothing anywhere real).
const PAYER_KEY: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

sol! {
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// The signing key, its address, the authorization fields every request shares, and the
/// EIP-712 domain from the 402's `accepted` (extra.name/version, network, asset).
struct Signer {
    key: k256::ecdsa::SigningKey,
    template: TransferWithAuthorization,
    domain: Eip712Domain,
}

impl Signer {
    fn new(accepted: &Value) -> Result<Signer, BenchError> {
        let setup = |what: &str| BenchError::Setup(format!("402 accepted: {what}"));
        let bytes = alloy_primitives::hex::decode(PAYER_KEY).map_err(|_| setup("key"))?;
        let key = k256::ecdsa::SigningKey::from_slice(&bytes).map_err(|_| setup("key"))?;
        let text = |pointer: &str| {
            accepted
                .pointer(pointer)
                .and_then(Value::as_str)
                .ok_or_else(|| setup(pointer))
        };
        let chain_id: u64 = text("/network")?
            .strip_prefix("eip155:")
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| setup("network"))?;
        let domain = Eip712Domain::new(
            Some(text("/extra/name")?.to_string().into()),
            Some(text("/extra/version")?.to_string().into()),
            Some(U256::from(chain_id)),
            Some(text("/asset")?.parse().map_err(|_| setup("asset"))?),
            None,
        );
        let template = TransferWithAuthorization {
            from: Address::from_private_key(&key),
            to: text("/payTo")?.parse().map_err(|_| setup("payTo"))?,
            value: U256::from_str_radix(text("/amount")?, 10).map_err(|_| setup("amount"))?,
            validAfter: U256::ZERO,
            validBefore: U256::from(99_999_999_999u64),
            nonce: B256::ZERO,
        };
        Ok(Signer {
            key,
            template,
            domain,
        })
    }

    /// `payload.payload` for one nonce: the authorization and its 65-byte signature.
    fn sign(&self, nonce: B256) -> Result<Value, BenchError> {
        let mut message = self.template.clone();
        message.nonce = nonce;
        // The official clients' window (now + maxTimeoutSeconds): the gate refuses one that
        // reaches further, or that is too short to settle.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        message.validBefore = U256::from(now + 60);
        let hash = message.eip712_signing_hash(&self.domain);
        let signature: Signature = self
            .key
            .sign_prehash_recoverable(hash.as_slice())
            .map_err(|e| BenchError::Setup(format!("signing: {e}")))?
            .into();
        Ok(json!({
            "signature": format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes())),
            "authorization": {
                "from": message.from.to_checksum(None),
                "to": message.to.to_checksum(None),
                "value": message.value.to_string(),
                "validAfter": message.validAfter.to_string(),
                "validBefore": message.validBefore.to_string(),
                "nonce": nonce.to_string(),
            },
        }))
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// factomat's base URL (loopback); several replicas: repeat it, payer i uses the
    /// (i mod n)-th.
    #[arg(long, required = true)]
    url: Vec<String>,
    /// The paid path, e.g. /v1/allowance-exposure.
    #[arg(long)]
    path: String,
    /// The JSON request body.
    #[arg(long)]
    body: String,
    /// Concurrent payers.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
}

/// What one payer saw.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    statuses: BTreeMap<u16, u64>,
    transport_errors: u64,
}

fn client() -> Result<reqwest::Client, BenchError> {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(1)
        .build()
        .map_err(|e| BenchError::Setup(format!("http client: {e}")))
}

/// The PaymentRequired object of factomat's 402 for this path and body.
async fn challenge(args: &Args) -> Result<Value, BenchError> {
    let response = client()?
        .post(format!("{}{}", args.url[0], args.path))
        .header("content-type", "application/json")
        .body(args.body.clone())
        .send()
        .await
        .map_err(|e| BenchError::Setup(format!("challenge request: {e}")))?;
    if response.status().as_u16() != 402 {
        return Err(BenchError::Setup(format!(
            "expected 402 without payment, got {}",
            response.status()
        )));
    }
    let header = response
        .headers()
        .get("payment-required")
        .ok_or_else(|| BenchError::Setup("402 without PAYMENT-REQUIRED".into()))?;
    let bytes = STANDARD
        .decode(header.as_bytes())
        .map_err(|e| BenchError::Setup(format!("PAYMENT-REQUIRED base64: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| BenchError::Setup(format!("PAYMENT-REQUIRED JSON: {e}")))
}

/// A unique 32-byte nonce: run id, payer index, sequence number.
fn nonce(run: u64, payer: usize, sequence: u64) -> B256 {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&run.to_be_bytes());
    bytes[8..16].copy_from_slice(&(payer as u64).to_be_bytes());
    bytes[24..].copy_from_slice(&sequence.to_be_bytes());
    B256::from(bytes)
}

fn signature_header(required: &Value, signer: &Signer, nonce: B256) -> Result<String, BenchError> {
    let mut payload = json!({
        "x402Version": 2,
        "resource": required.get("resource").cloned().unwrap_or(Value::Null),
        "accepted": required.pointer("/accepts/0").cloned().unwrap_or(Value::Null),
        "payload": signer.sign(nonce)?,
    });
    // Every extension of the 402 echoed as it came, as x402 v2 asks of a client (the
    // official clients do).
    if let (Some(extensions), Some(object)) = (required.get("extensions"), payload.as_object_mut())
    {
        object.insert("extensions".into(), extensions.clone());
    }
    Ok(STANDARD.encode(serde_json::to_vec(&payload).unwrap_or_default()))
}

async fn payer(
    index: usize,
    run: u64,
    url: String,
    body: String,
    required: Value,
    deadline: Instant,
) -> Result<Tally, BenchError> {
    let client = client()?;
    let signer = Signer::new(required.pointer("/accepts/0").unwrap_or(&Value::Null))?;
    let mut tally = Tally::default();
    let mut sequence = 0u64;
    while Instant::now() < deadline {
        sequence += 1;
        let header = signature_header(&required, &signer, nonce(run, index, sequence))?;
        let started = Instant::now();
        let sent = client
            .post(&url)
            .header("content-type", "application/json")
            .header("payment-signature", header)
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let _ = response.bytes().await;
                tally
                    .latencies_us
                    .push(started.elapsed().as_micros() as u64);
                *tally.statuses.entry(status).or_default() += 1;
            }
            Err(_) => tally.transport_errors += 1,
        }
    }
    Ok(tally)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let required = challenge(&args).await?;
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.duration);
    let urls: Vec<String> = args
        .url
        .iter()
        .map(|base| format!("{base}{}", args.path))
        .collect();
    let tasks: Vec<_> = (0..args.concurrency.max(1))
        .map(|i| {
            tokio::spawn(payer(
                i,
                run,
                urls[i % urls.len()].clone(),
                args.body.clone(),
                required.clone(),
                deadline,
            ))
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        let tally = task
            .await
            .map_err(|e| BenchError::Setup(format!("payer task: {e}")))??;
        total.latencies_us.extend(tally.latencies_us);
        total.transport_errors += tally.transport_errors;
        for (status, n) in tally.statuses {
            *total.statuses.entry(status).or_default() += n;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    total.latencies_us.sort_unstable();
    let ok = total.statuses.get(&200).copied().unwrap_or_default();
    let report = json!({
        "requests": total.latencies_us.len(),
        "ok": ok,
        "statuses": total.statuses,
        "transport_errors": total.transport_errors,
        "rps": ok as f64 / elapsed,
        "p50_ms": percentile(&total.latencies_us, 50.0),
        "p99_ms": percentile(&total.latencies_us, 99.0),
    });
    println!("{report}");
    Ok(())
}
