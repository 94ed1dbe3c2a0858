//! One server selling VM02 in front of a dev stack, through a facilitator proxy (which records
//! `/verify` and `/settle` and treats `/settle` as told) and an RPC proxy that refuses
//! `eth_getLogs` over Alchemy's free-tier range: the rig of the settlement and lost-answer
//! tests.
#![allow(dead_code)]

use std::time::Duration;

use factomat::pay::ledger::AttemptRow;
use serde_json::{Value, json};

use super::devstack::{Buyer, DevStack, random_hex32};
use super::facilitator_proxy::{FacilitatorProxy, Settle, facilitator_proxy};
use super::ledgers::{fresh_ledger_url, ledger_cli, report_entry, rows_of};
use super::rpc_proxy::{RpcProxy, range_limited_rpc};
use super::{TestServer, decode_header};

/// A fresh payment-identifier `id` (30 characters of `[A-Za-z0-9_-]`).
pub fn fresh_payment_id() -> String {
    format!("payment-id-{}", &random_hex32()[2..21])
}

/// The cheapest paid machine (one ERC-20 allowance against a balance).
pub const VM02: &str = "/v1/allowance-exposure";
/// USDC on Base (the dev stack places its token there).
pub const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
/// VM02's price in atomic USDC.
pub const PRICE: u128 = 10_000;
/// Alchemy's free tier: 10 blocks per `eth_getLogs`.
pub const PROVIDER_LOG_LIMIT: u64 = 10;

/// A server in front of `stack` through a facilitator proxy and a range-limited RPC.
pub struct Rig<'a> {
    pub stack: &'a DevStack,
    pub server: TestServer,
    pub facilitator: FacilitatorProxy,
    pub rpc: RpcProxy,
    pub ledger_url: String,
}

impl<'a> Rig<'a> {
    /// A rig on a fresh ledger of the test's backend; `env` adds or overrides configuration
    /// (later pairs win).
    pub async fn start(stack: &'a DevStack, settle: Settle, env: &[(&str, &str)]) -> Rig<'a> {
        Rig::start_on(stack, settle, env, fresh_ledger_url()).await
    }

    /// A rig on the ledger at `ledger_url`.
    pub async fn start_on(
        stack: &'a DevStack,
        settle: Settle,
        env: &[(&str, &str)],
        ledger_url: String,
    ) -> Rig<'a> {
        let facilitator = facilitator_proxy(stack, settle).await;
        let rpc = range_limited_rpc(&stack.field("rpc_url"), PROVIDER_LOG_LIMIT).await;
        let pay_to = stack.field("pay_to");
        let mut all = vec![
            ("FACTOMAT_PAY_TO", pay_to.as_str()),
            ("FACTOMAT_FACILITATOR_URL", facilitator.url.as_str()),
            ("FACTOMAT_RPC_URL_EIP155_8453", rpc.url.as_str()),
            ("FACTOMAT_DATABASE_URL", ledger_url.as_str()),
            ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
        ];
        all.extend_from_slice(env);
        let server = TestServer::with_env(&all).await;
        Rig {
            stack,
            server,
            facilitator,
            rpc,
            ledger_url,
        }
    }

    /// Another server on this rig's ledger with a new delivery key: the answers retained so
    /// far no longer open there (a replaced key, or a replica keyed otherwise).
    pub async fn with_a_new_delivery_key(&self) -> Rig<'a> {
        let key = super::temp_path("replaced-delivery-key");
        std::fs::write(&key, &random_hex32()[2..]).expect("key file");
        let key = key.display().to_string();
        let replaced = [("FACTOMAT_DELIVERY_KEY_FILE", key.as_str())];
        Rig::start_on(
            self.stack,
            Settle::Forward,
            &replaced,
            self.ledger_url.clone(),
        )
        .await
    }

    pub fn url(&self) -> String {
        format!("{}{VM02}", self.server.url)
    }

    /// A VM02 request about `buyer`'s USDC allowance to our payee.
    pub fn request(&self, buyer: &Buyer) -> Value {
        json!({"owner": buyer.address, "token": USDC, "spender": self.stack.field("pay_to")})
    }

    /// The PAYMENT-REQUIRED header and JSON body of an unpaid call.
    pub async fn challenge(&self, body: &Value) -> (String, Value) {
        self.server.challenge(VM02, body).await
    }

    /// A PAYMENT-SIGNATURE of `buyer` for this call, with sign.mjs mutations.
    pub async fn sign(&self, buyer: &Buyer, body: &Value, mutations: &[&str]) -> (String, Value) {
        let (required, _) = self.challenge(body).await;
        let signed = self.stack.sign_as(buyer, &required, mutations);
        let header = signed["header"].as_str().expect("header").to_string();
        (header, signed)
    }

    /// A PAYMENT-SIGNATURE of `buyer` whose payload carries `id` in its payment-identifier
    /// extension (the 402's declaration with `info.id` added, as the official client sends it).
    pub async fn sign_with_id(&self, buyer: &Buyer, body: &Value, id: &str) -> (String, Value) {
        let info = format!(
            "payment-identifier={}",
            json!({"required": false, "id": id})
        );
        self.sign(buyer, body, &["--extension-info", &info]).await
    }

    /// The buyer's VM02 request, signed as it is and sent once: the body, the payment header
    /// and the answer.
    pub async fn pay_once(&self, buyer: &Buyer) -> (Value, String, reqwest::Response) {
        let body = self.request(buyer);
        let (header, _) = self.sign(buyer, &body, &[]).await;
        let response = self.send(&body, &header).await;
        (body, header, response)
    }

    pub async fn send(&self, body: &Value, header: &str) -> reqwest::Response {
        self.server.post_paid(VM02, body, header).await
    }

    /// A paid call with exactly these body bytes.
    pub async fn send_raw(&self, body: Vec<u8>, header: &str) -> reqwest::Response {
        self.server.post_paid_raw(VM02, body, header).await
    }

    pub async fn rows(&self) -> Vec<AttemptRow> {
        rows_of(&self.ledger_url).await
    }

    /// The ledger's one row; fails the test when it holds another number of rows.
    pub async fn only_row(&self) -> AttemptRow {
        let mut rows = self.rows().await;
        assert_eq!(rows.len(), 1, "one ledger row: {rows:?}");
        rows.remove(0)
    }

    pub fn balance(&self, address: &str) -> u128 {
        self.stack
            .usdc_balance(address)
            .trim_matches('"')
            .parse()
            .expect("balance")
    }

    /// `factomat ledger ARGS --json` on this rig's ledger and RPC.
    pub fn ledger_command(&self, args: &[&str]) -> Value {
        ledger_cli(&self.ledger_url, Some(&self.rpc.url), args)
    }

    pub fn reconcile(&self) -> Vec<Value> {
        let entries = self.ledger_command(&["reconcile"]);
        entries.as_array().expect("entries").clone()
    }

    pub fn vm02_paid_calls(&self) -> u64 {
        let report = self.ledger_command(&["report"]);
        report_entry(&report, "machines", "machine", "VM02")["paid_calls"]
            .as_u64()
            .expect("VM02 paid calls")
    }
}

/// The rejection reason of a 402: the `error` of its fresh PAYMENT-REQUIRED.
pub fn reason_of(response: &reqwest::Response) -> String {
    super::payment_required(response)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The decoded PAYMENT-RESPONSE of an answer.
pub fn payment_response(response: &reqwest::Response) -> Value {
    decode_header(
        response.headers()["payment-response"]
            .to_str()
            .expect("ascii"),
    )
}

/// Polls `done` every 250 ms until it holds; fails after 60 s.
pub async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
