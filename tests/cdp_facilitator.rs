//! The CDP facilitator's per-request JWT: a loopback verifier (jose, the throwaway key's public
//! half) in front of the dev stack's official facilitator accepts the official SDK's tokens
//! and factomat's, refuses replayed, expired and foreign ones, and a paid call through it
//! settles on anvil for an ES256 and for an Ed25519 key.

mod common;

use common::cdp::{self, ApiKey, CdpFacilitator};
use common::devstack::{Buyer, DevStack, shared_stack};
use common::logs::{capture, logs};
use common::{TestServer, temp_path};
use factomat::pay::ledger::{Ledger, PoolOptions};
use serde_json::{Value, json};

const VM02: &str = "/v1/allowance-exposure";
const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
/// USDC each test's buyer starts with.
const BUYER_USDC: &str = "1000000";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

async fn supported_with(facilitator: &CdpFacilitator, token: &str) -> u16 {
    client()
        .get(format!("{}/supported", facilitator.url))
        .bearer_auth(token)
        .send()
        .await
        .expect("answered")
        .status()
        .as_u16()
}

/// The verifier takes the SDK's token for the right request, and refuses it replayed, used on
/// another path, expired, or signed by another key.
async fn the_verifier_follows_the_sdk(key: &ApiKey, other: &ApiKey, facilitator: &CdpFacilitator) {
    let host = facilitator.host();
    let supported = "/platform/v2/x402/supported";
    let token = cdp::sdk_token(key, "GET", &host, supported, None);
    assert_eq!(supported_with(facilitator, &token).await, 200, "SDK token");
    assert_eq!(supported_with(facilitator, &token).await, 401, "replayed");
    let for_settle = cdp::sdk_token(key, "POST", &host, "/platform/v2/x402/settle", None);
    assert_eq!(
        supported_with(facilitator, &for_settle).await,
        401,
        "other path"
    );
    let foreign = cdp::sdk_token(other, "GET", &host, supported, None);
    assert_eq!(
        supported_with(facilitator, &foreign).await,
        401,
        "other key"
    );
    let short = cdp::sdk_token(key, "GET", &host, supported, Some(1));
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert_eq!(supported_with(facilitator, &short).await, 401, "expired");
    let stats = facilitator.stats().await;
    assert_eq!(stats["accepted"], 1, "{stats}");
    assert_eq!(stats["rejected"]["nonce_replayed"], 1, "{stats}");
    assert_eq!(stats["rejected"]["wrong_uri"], 1, "{stats}");
    assert_eq!(
        stats["rejected"]["jwt_ERR_JWS_SIGNATURE_VERIFICATION_FAILED"], 1,
        "{stats}"
    );
    assert_eq!(stats["rejected"]["jwt_ERR_JWT_EXPIRED"], 1, "{stats}");
}

async fn factomat_with(
    stack: &DevStack,
    facilitator: &str,
    key: &ApiKey,
    ledger: &str,
) -> TestServer {
    let pay_to = stack.field("pay_to");
    let rpc = stack.field("rpc_url");
    let secret_file = key.secret_file.display().to_string();
    TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", pay_to.as_str()),
        ("FACTOMAT_FACILITATOR_URL", facilitator),
        ("FACTOMAT_FACILITATOR_AUTH", "cdp"),
        ("FACTOMAT_FACILITATOR_API_KEY_ID", key.key_id.as_str()),
        (
            "FACTOMAT_FACILITATOR_API_KEY_SECRET_FILE",
            secret_file.as_str(),
        ),
        ("FACTOMAT_RPC_URL_EIP155_8453", rpc.as_str()),
        ("FACTOMAT_DATABASE_URL", ledger),
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
    ])
    .await
}

fn usdc(stack: &DevStack, address: &str) -> u128 {
    stack
        .usdc_balance(address)
        .trim_matches('"')
        .parse()
        .expect("balance")
}

/// factomat's own tokens get a paid call through the verifier, settled on anvil.
async fn a_paid_call_settles_through_the_verifier(stack: &DevStack, buyer: &Buyer, key: &ApiKey) {
    let facilitator = CdpFacilitator::start(key, &stack.field("facilitator_url"));
    let ledger = format!("sqlite:{}", temp_path("ledger.db").display());
    let server = factomat_with(stack, &facilitator.url, key, &ledger).await;
    let before = usdc(stack, &buyer.address);
    let request = json!({"owner": buyer.address, "token": USDC, "spender": stack.field("pay_to")});
    let answer = stack.pay_as(buyer, &format!("{}{VM02}", server.url), &request);
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["payment_response"]["success"], true, "{answer}");
    assert_eq!(before - usdc(stack, &buyer.address), 10_000, "charged once");
    let rows = Ledger::open(&ledger, PoolOptions::default())
        .expect("ledger")
        .rows()
        .await
        .expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "settled");
    let stats = facilitator.stats().await;
    // /supported at start-up, /verify and /settle: each with its own token.
    assert_eq!(stats["accepted"], 3, "{stats}");
    assert_eq!(stats["rejected"], json!({}), "{stats}");
}

/// A key the facilitator does not know: 401, a clear 503, nothing charged, the key in no log.
async fn a_wrong_key_means_503_and_nothing_charged(
    stack: &DevStack,
    buyer: &Buyer,
    known: &ApiKey,
    wrong: &ApiKey,
) {
    let facilitator = CdpFacilitator::start(known, &stack.field("facilitator_url"));
    let ledger = format!("sqlite:{}", temp_path("ledger.db").display());
    let server = factomat_with(stack, &facilitator.url, wrong, &ledger).await;
    let before = usdc(stack, &buyer.address);
    let request = json!({"owner": buyer.address, "token": USDC, "spender": stack.field("pay_to")});
    let answer = stack.pay_as(buyer, &format!("{}{VM02}", server.url), &request);
    assert_eq!(answer["status"], 503, "{answer}");
    let body: &Value = &answer["body"];
    assert_eq!(body["error"]["code"], "facilitator_unavailable", "{answer}");
    assert_eq!(usdc(stack, &buyer.address), before, "nothing charged");
    let rows = Ledger::open(&ledger, PoolOptions::default())
        .expect("ledger")
        .rows()
        .await
        .expect("rows");
    assert!(rows.is_empty(), "no row reserved");
    let stats = facilitator.stats().await;
    assert_eq!(stats["accepted"], 0, "{stats}");
}

fn assert_no_secret_logged(keys: &[&ApiKey]) {
    let logs = logs();
    assert!(
        logs.contains("facilitator refused our credentials"),
        "the 401 is logged as such"
    );
    for key in keys {
        for line in key
            .secret
            .lines()
            .filter(|l| l.len() > 20 && !l.starts_with("-----"))
        {
            assert!(!logs.contains(line), "a key line reached the logs");
        }
    }
    assert!(!logs.contains("Bearer "), "a token reached the logs");
    assert!(!logs.contains("eyJ"), "a JWT reached the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es256_keys_from_pkcs8_and_sec1_pem() {
    capture();
    let stack = shared_stack();
    let buyer = stack.fresh_buyer(BUYER_USDC);
    let (pkcs8, sec1, _) = cdp::keys();
    let (other, _, _) = cdp::keys();
    let verifier = CdpFacilitator::start(&pkcs8, &stack.field("facilitator_url"));
    the_verifier_follows_the_sdk(&pkcs8, &other, &verifier).await;
    drop(verifier);
    a_paid_call_settles_through_the_verifier(stack, &buyer, &pkcs8).await;
    a_paid_call_settles_through_the_verifier(stack, &buyer, &sec1).await;
    a_wrong_key_means_503_and_nothing_charged(stack, &buyer, &pkcs8, &other).await;
    assert_no_secret_logged(&[&pkcs8, &other]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eddsa_keys_from_base64() {
    capture();
    let stack = shared_stack();
    let buyer = stack.fresh_buyer(BUYER_USDC);
    let (_, _, ed25519) = cdp::keys();
    let (_, _, other) = cdp::keys();
    let verifier = CdpFacilitator::start(&ed25519, &stack.field("facilitator_url"));
    the_verifier_follows_the_sdk(&ed25519, &other, &verifier).await;
    drop(verifier);
    a_paid_call_settles_through_the_verifier(stack, &buyer, &ed25519).await;
    a_wrong_key_means_503_and_nothing_charged(stack, &buyer, &ed25519, &other).await;
    assert_no_secret_logged(&[&ed25519, &other]);
}

#[tokio::test]
async fn a_malformed_key_stops_start_up_without_printing_it() {
    let secret = "-----BEGIN PRIVATE KEY-----\nTUFMRk9STUVEU0VDUkVUS0VZTUFURVJJQUw=\n-----END PRIVATE KEY-----";
    let config = factomat::config::Config::from_env([
        ("FACTOMAT_LISTEN".to_string(), "127.0.0.1:0".to_string()),
        ("FACTOMAT_FACILITATOR_AUTH".into(), "cdp".into()),
        ("FACTOMAT_FACILITATOR_API_KEY_ID".into(), "key-1".into()),
        ("FACTOMAT_FACILITATOR_API_KEY_SECRET".into(), secret.into()),
    ])
    .expect("the configuration itself is complete");
    let error = match factomat::http::server::start(config).await {
        Ok(_) => panic!("a malformed key must stop start-up"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("facilitator_api_key_secret"), "{error}");
    assert!(!error.contains("TUFMRk9STUVE"), "{error}");
}
