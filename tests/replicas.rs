//! Many replicas on one PostgreSQL ledger, under concurrent replays, crashes, signals and a
//! database outage. Real PostgreSQL (`FACTOMAT_TEST_DATABASE_URL` or a throwaway cluster),
//! the official x402 client and facilitator, anvil; everything on 127.0.0.1.

mod common;

use std::time::Duration;

use common::devstack::{Buyer, DevStack, shared_stack};
use common::facilitator_proxy::{Settle, advance_past, proxied_facilitator};
use common::ledgers::{ledger_cli, report_entry, rows_of, vm02_attempt};
use common::onchain::{rpc_tripwire, serve};
use common::paid_rig::{PRICE, USDC, VM02};
use common::postgres;
use common::replica::Replica;
use common::{TestServer, closed_port, unix_now};
use factomat::pay::ledger::{Ledger, PoolOptions};
use serde_json::{Value, json};
use warp::Filter;

fn env_for<'a>(
    stack: &'a DevStack,
    facilitator: &'a str,
    rpc: &'a str,
    database: &'a str,
) -> Vec<(&'static str, String)> {
    // Replicas behind one load balancer publish one base URL: a payment signed against one
    // replica's 402 names the same resource on every other.
    vec![
        ("FACTOMAT_BASE_URL", common::BASE_URL.to_string()),
        ("FACTOMAT_PAY_TO", stack.field("pay_to")),
        ("FACTOMAT_FACILITATOR_URL", facilitator.to_string()),
        ("FACTOMAT_RPC_URL_EIP155_8453", rpc.to_string()),
        ("FACTOMAT_DATABASE_URL", database.to_string()),
        (
            "FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS",
            "20000".to_string(),
        ),
        // A resend of a payment still in flight waits this long for its answer.
        ("FACTOMAT_DELIVERY_IN_FLIGHT_WAIT_MS", "1000".to_string()),
    ]
}

/// A replica's environment on a fresh database, whose facilitator settles `delay` late; and
/// that database's URL.
async fn slow_settling(stack: &DevStack, delay: Duration) -> (Vec<(&'static str, String)>, String) {
    let slow = proxied_facilitator(stack.field("facilitator_url"), Settle::After(delay)).await;
    let database = postgres::fresh_database();
    let facilitator = format!("http://{slow}");
    let env = env_for(stack, &facilitator, &stack.field("rpc_url"), &database);
    (env, database)
}

fn pairs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn vm02_body(stack: &DevStack, buyer: &Buyer) -> Value {
    json!({"owner": buyer.address, "token": USDC, "spender": stack.field("pay_to")})
}

/// A test's buyer on the binary's shared stack: its balance is the test's alone.
fn fresh_buyer() -> (&'static DevStack, Buyer) {
    let stack = shared_stack();
    (stack, stack.fresh_buyer("1000000"))
}

fn buyer_balance(stack: &DevStack, buyer: &Buyer) -> u128 {
    stack
        .usdc_balance(&buyer.address)
        .trim_matches('"')
        .parse()
        .expect("balance")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

async fn challenge(url: &str, body: &Value) -> String {
    let response = client()
        .post(format!("{url}{VM02}"))
        .json(body)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 402);
    response.headers()["payment-required"]
        .to_str()
        .expect("ascii")
        .to_string()
}

async fn paid(url: &str, body: &Value, header: &str) -> reqwest::Response {
    client()
        .post(format!("{url}{VM02}"))
        .header("PAYMENT-SIGNATURE", header)
        .json(body)
        .send()
        .await
        .expect("answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_run_one_payment_once_when_50_copies_race() {
    let (stack, buyer) = fresh_buyer();
    let database = postgres::fresh_database();
    let env = env_for(
        stack,
        &stack.field("facilitator_url"),
        &stack.field("rpc_url"),
        &database,
    );
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestServer::with_env(&pairs(&env)).await);
    }
    let body = vm02_body(stack, &buyer);
    let required = challenge(&replicas[0].url, &body).await;
    let header = stack.payment_header_as(&buyer, &required, &[]);
    let before = buyer_balance(stack, &buyer);
    let calls = (0..50).map(|n| paid(&replicas[n % 3].url, &body, &header));
    let responses = futures_util::future::join_all(calls).await;
    common::assert_one_answer(responses).await;
    assert_eq!(before - buyer_balance(stack, &buyer), PRICE, "charged once");
    let rows = rows_of(&database).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].state, "settled");
    let work_ran: u64 = replicas.iter().map(TestServer::outbound).sum();
    // One replica ran the work and settled; the others made at most the /verify calls of
    // copies that reached verify before the first row existed, never the work's RPC reads.
    assert!(work_ran >= 3, "the winning call went outbound: {work_ran}");

    // The report over all replicas' rows: one wallet for the family.
    let report = ledger_cli(&database, None, &["report"]);
    let family = report_entry(&report, "families", "family", "ONCHAIN_PREFLIGHT");
    assert_eq!(family["unique_paying_wallets"], 1);
}

/// An admin endpoint's status and body.
async fn admin_get(admin: &str, path: &str) -> (u16, String) {
    let response = client()
        .get(format!("{admin}{path}"))
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    (status, response.text().await.expect("text"))
}

/// `/readyz` once its cached verdict has expired.
async fn fresh_readiness(admin: &str) -> (u16, Value) {
    tokio::time::sleep(factomat::http::READY_CACHE).await;
    let (status, body) = admin_get(admin, "/readyz").await;
    (status, serde_json::from_str(&body).expect("json"))
}

/// The `factomat_ledger_rows` sample of one state in an exposition.
fn ledger_rows(exposition: &str, state: &str) -> Option<f64> {
    let prefix = format!("factomat_ledger_rows{{state=\"{state}\"}} ");
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

/// The PostgreSQL ledger under an outage, with what an operator sees of it: the paid call's
/// row keeps its x-request-id, /metrics counts rows by state and /readyz's write check
/// follow the database down and back up. One cluster for all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_answers_503_before_any_work_and_heals_without_restart() {
    let (stack, buyer) = fresh_buyer();
    let cluster = postgres::start_cluster();
    let database = postgres::fresh_database_on(&cluster.url);
    let env = env_for(
        stack,
        &stack.field("facilitator_url"),
        &stack.field("rpc_url"),
        &database,
    );
    let mut env = env;
    env.push(("FACTOMAT_DATABASE_CONNECT_TIMEOUT_MS", "1000".into()));
    env.push(("FACTOMAT_ADMIN_LISTEN", "127.0.0.1:0".into()));
    let server = TestServer::with_env(&pairs(&env)).await;
    let admin = server.admin_url();
    let (status, ready) = fresh_readiness(&admin).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["ledger"], "ok");
    let body = vm02_body(stack, &buyer);
    let required = challenge(&server.url, &body).await;
    let first = stack.payment_header_as(&buyer, &required, &[]);
    let first_paid = client()
        .post(format!("{}{VM02}", server.url))
        .header("PAYMENT-SIGNATURE", &first)
        .header("x-request-id", "buyer-support-7f3a")
        .json(&body)
        .send()
        .await
        .expect("answered");
    assert_eq!(first_paid.status().as_u16(), 200);
    assert_eq!(first_paid.headers()["x-request-id"], "buyer-support-7f3a");
    let rows = rows_of(&database).await;
    assert_eq!(
        rows[0].request_id.as_deref(),
        Some("buyer-support-7f3a"),
        "the PostgreSQL row keeps the request id: {rows:?}"
    );
    let (status, exposition) = admin_get(&admin, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        ledger_rows(&exposition, "settled"),
        Some(1.0),
        "ledger rows by state, read from PostgreSQL\n{exposition}"
    );
    assert_eq!(
        ledger_rows(&exposition, "reserved"),
        Some(0.0),
        "every state is a series: {exposition}"
    );

    cluster.halt();
    let (status, ready) = fresh_readiness(&admin).await;
    assert_eq!(status, 503, "not ready while PostgreSQL is down: {ready}");
    assert_eq!(ready["ledger"], "not_writable");
    assert_eq!(ready["facilitator"], "ok");
    let before = buyer_balance(stack, &buyer);
    let outbound = server.outbound();
    let header = stack.payment_header_as(&buyer, &required, &[]);
    let refused = paid(&server.url, &body, &header).await;
    assert_eq!(refused.status().as_u16(), 503);
    assert!(refused.headers().get("payment-response").is_none());
    let error: Value = refused.json().await.expect("json");
    assert_eq!(error["error"]["code"], "ledger_unavailable", "{error}");
    assert_eq!(server.outbound(), outbound, "no verify, no work, no settle");
    assert_eq!(buyer_balance(stack, &buyer), before, "nothing charged");

    cluster.resume();
    let (status, ready) = fresh_readiness(&admin).await;
    assert_eq!(status, 200, "ready again once PostgreSQL is back: {ready}");
    let healed = paid(&server.url, &body, &header).await;
    assert_eq!(healed.status().as_u16(), 200, "the same payment now runs");
    assert_eq!(before - buyer_balance(stack, &buyer), PRICE);
    let rows = rows_of(&database).await;
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.state == "settled"), "{rows:?}");
}

/// A SIGTERM that arrives while a paid call settles: with the default drain the call still
/// settles, records and answers, and the process then exits 0. The default drain's length
/// (`maxTimeoutSeconds` + 10 s, past Kubernetes' 30 s grace period) is held to the manifest by
/// a unit test in `http::server`; the settle here is slow by seconds, not by that much.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_paid_call_settle_and_record_then_exits_0() {
    let (stack, buyer) = fresh_buyer();
    let (mut env, database) = slow_settling(stack, Duration::from_secs(4)).await;
    // The default settle timeout (60 s) and the default drain: nothing shortened here.
    env.retain(|(name, _)| *name != "FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS");
    let mut replica = Replica::spawn(&pairs(&env)).await;
    let body = vm02_body(stack, &buyer);
    let required = challenge(&replica.url, &body).await;
    let header = stack.payment_header_as(&buyer, &required, &[]);
    let before = buyer_balance(stack, &buyer);
    let url = replica.url.clone();
    let call = tokio::spawn(async move { paid(&url, &body, &header).await.status().as_u16() });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    replica.signal("TERM");
    assert_eq!(
        call.await.expect("call"),
        200,
        "the in-flight call completes"
    );
    let status = replica.exit_status(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
    let rows = rows_of(&database).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "settled");
    assert_eq!(before - buyer_balance(stack, &buyer), PRICE);
}

/// A replica killed inside the work leaves a `reserved` row whose outcome nobody knows: the
/// identical resend on another replica hears "in progress" (never a fresh challenge) and runs
/// nothing; reconcile leaves it while the authorization is valid; once the row is past
/// `validBefore` plus the margin, a resend is no longer waited on — the chain decides it
/// (unused past `validBefore`: expired, 402) and nothing was charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_inside_the_work_leaves_a_reserved_row_that_the_chain_expires() {
    // Its own stack: the test moves anvil's clock past validBefore.
    let stack = DevStack::start();
    let buyer = stack.buyer();
    let rpc = stack.field("rpc_url");
    // An RPC endpoint that never answers: the paid call sits inside VM02's work.
    let stalled = serve(warp::any().then(|| async {
        tokio::time::sleep(Duration::from_secs(120)).await;
        "{}"
    }))
    .await;
    let database = postgres::fresh_database();
    let mut env = env_for(
        &stack,
        &stack.field("facilitator_url"),
        &format!("http://{stalled}"),
        &database,
    );
    // A short /verify budget lets the window check accept a short authorization, so the row
    // goes stale (validBefore + 10 s) within the test.
    env.push(("FACTOMAT_FACILITATOR_VERIFY_TIMEOUT_MS", "2000".into()));
    let mut doomed = Replica::spawn(&pairs(&env)).await;
    let body = vm02_body(&stack, &buyer);
    let required = challenge(&doomed.url, &body).await;
    let before = buyer_balance(&stack, &buyer);
    // The window check asks for verify (2 s) + VM02's work (10 s) + 10 s after the 6 s
    // margin: 28 s. Ten more cover signing and sending on a busy machine.
    let valid_before = unix_now() + 38;
    let signed_before = valid_before.to_string();
    let header = stack.payment_header_as(&buyer, &required, &["--valid-before", &signed_before]);
    let (url, sent_body, sent_header) = (doomed.url.clone(), body.clone(), header.clone());
    let call = tokio::spawn(async move {
        client()
            .post(format!("{url}{VM02}"))
            .header("PAYMENT-SIGNATURE", sent_header)
            .json(&sent_body)
            .send()
            .await
            .is_err()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rows_of(&database).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no row was reserved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    doomed.signal("KILL");
    doomed.exit_status(Duration::from_secs(10)).await;
    assert!(
        call.await.expect("call"),
        "the connection died with the replica"
    );
    let rows = rows_of(&database).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "reserved");
    assert_eq!(buyer_balance(&stack, &buyer), before, "not charged");

    // Another replica, whose RPC endpoint counts every request: the work would read it.
    let (tripwire, hits) = rpc_tripwire().await;
    let env = env_for(
        &stack,
        &stack.field("facilitator_url"),
        &format!("http://{tripwire}"),
        &database,
    );
    let other = TestServer::with_env(&pairs(&env)).await;
    let replay = paid(&other.url, &body, &header).await;
    // The row is reserved and its outcome unknown: the identical resend waits (1 s here),
    // then hears "in progress" — never a fresh challenge — and nothing runs.
    assert_eq!(replay.status().as_u16(), 503);
    assert!(replay.headers().contains_key("retry-after"));
    let refusal: Value = replay.json().await.expect("JSON error");
    assert_eq!(refusal["error"]["code"], "payment_in_progress", "{refusal}");
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the replay ran no work"
    );

    assert_eq!(rows[0].valid_before, Some(signed_before));
    let reconcile = || ledger_cli(&database, Some(&rpc), &["reconcile"]);
    let early = reconcile();
    assert_eq!(early[0]["state_after"], "reserved", "still valid: {early}");

    let env = env_for(&stack, &stack.field("facilitator_url"), &rpc, &database);
    let judge = TestServer::with_env(&pairs(&env)).await;
    while unix_now() <= valid_before + 10 {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    advance_past(&rpc, valid_before + 60).await;
    let stale = paid(&judge.url, &body, &header).await;
    assert_eq!(stale.status().as_u16(), 402, "decided, not waited on");
    let required = common::payment_required(&stale);
    assert_eq!(required["error"], "settlement_failed", "{required}");
    assert_eq!(rows_of(&database).await[0].state, "expired");
    assert_eq!(reconcile(), json!([]), "nothing left to reconcile");
    assert_eq!(buyer_balance(&stack, &buyer), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_migrate_once_and_share_one_unique_nonce() {
    let database = postgres::fresh_database();
    let ledgers: Vec<Ledger> = (0..6)
        .map(|_| Ledger::open(&database, PoolOptions::default()).expect("pool"))
        .collect();
    let migrations = futures_util::future::join_all(ledgers.iter().map(Ledger::migrate)).await;
    assert!(
        migrations.iter().all(Result::is_ok),
        "concurrent migrations: {migrations:?}"
    );
    let contested = vm02_attempt(
        "0x00000000000000000000000000000000000c4a54",
        "e1",
        1_795_000_000,
    );
    let reserves =
        futures_util::future::join_all(ledgers.iter().map(|l| l.reserve(&contested))).await;
    assert_eq!(
        reserves.iter().filter(|r| r.is_ok()).count(),
        1,
        "{reserves:?}"
    );
    assert!(
        reserves
            .iter()
            .filter(|r| r.is_err())
            .all(|r| matches!(r, Err(factomat::pay::ledger::LedgerError::Duplicate)))
    );
    for ledger in &ledgers {
        assert!(ledger.knows_nonce(&"e1".repeat(32)).await.expect("knows"));
    }
    assert_eq!(
        postgres::psql(
            &database,
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'payment_attempts'"
        )
        .trim(),
        "5",
        "primary key, unique nonce, state, transfer proof and payer indexes: created once"
    );
    // The strike index is partial (only struck rows); the pre-check's `strike_until > $3`
    // still lets the planner use it.
    let plan = postgres::psql(
        &database,
        "SET enable_seqscan = off; EXPLAIN SELECT EXISTS (SELECT 1 FROM payment_attempts
         WHERE lower(payer) = '0xabc' AND strike_until > 5)",
    );
    assert!(plan.contains("payment_attempts_struck"), "{plan}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_unavailable_within_the_connect_timeout() {
    let closed = closed_port();
    let url = format!("postgres://factomat:hunter2@{}/ledger", closed.addr);
    let ledger = Ledger::open(
        &url,
        PoolOptions {
            max_size: 2,
            connect_timeout: Duration::from_millis(500),
        },
    )
    .expect("a pool is built without connecting");
    let started = std::time::Instant::now();
    let error = ledger
        .knows_nonce(&"aa".repeat(32))
        .await
        .expect_err("unreachable");
    assert!(
        matches!(error, factomat::pay::ledger::LedgerError::Unavailable(_)),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!error.to_string().contains("hunter2"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_timeout_leaves_the_open_call_reserved_and_says_so() {
    let (stack, buyer) = fresh_buyer();
    let (mut env, database) = slow_settling(stack, Duration::from_secs(4)).await;
    env.push(("FACTOMAT_SHUTDOWN_DRAIN_TIMEOUT_MS", "500".into()));
    env.push(("FACTOMAT_LOG_FORMAT", "json".into()));
    let mut replica = Replica::spawn(&pairs(&env)).await;
    let body = vm02_body(stack, &buyer);
    let required = challenge(&replica.url, &body).await;
    let header = stack.payment_header_as(&buyer, &required, &[]);
    let url = replica.url.clone();
    let call = tokio::spawn(async move {
        client()
            .post(format!("{url}{VM02}"))
            .header("PAYMENT-SIGNATURE", header)
            .json(&body)
            .send()
            .await
            .is_err()
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    replica.signal("TERM");
    let status = replica.exit_status(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(1), "the drain timed out: {status:?}");
    assert!(call.await.expect("call"), "the open call was cut");
    let log = replica.log();
    assert!(
        log.contains("drain timeout") && log.contains("\"open_paid_calls\":1"),
        "{log}"
    );
    let rows = rows_of(&database).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "reserved", "left for reconcile");
}

/// The ledger over TLS with libpq's `sslmode` meanings, against a PostgreSQL that takes TCP
/// only over TLS (`hostssl`) and presents a certificate for 127.0.0.1 from a CA made here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_over_verified_tls_serves_paid_calls_and_what_fails_the_check_stops_start_up() {
    let ca = common::https::TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let cluster = postgres::start_tls_cluster(&leaf.cert_pem(), &leaf.key_pem());
    let database = postgres::fresh_database_on(&cluster.url);
    let ca_file = ca.pem_path.display().to_string();
    let (stack, buyer) = fresh_buyer();
    let (facilitator, rpc) = (stack.field("facilitator_url"), stack.field("rpc_url"));

    let verified = format!("{database}?sslmode=verify-full&sslrootcert={ca_file}");
    let env = env_for(stack, &facilitator, &rpc, &verified);
    let replica = Replica::spawn(&pairs(&env)).await;
    let body = vm02_body(stack, &buyer);
    let required = challenge(&replica.url, &body).await;
    let header = stack.payment_header_as(&buyer, &required, &[]);
    assert_eq!(
        paid(&replica.url, &body, &header).await.status().as_u16(),
        200
    );
    let encrypted = postgres::psql(
        &cluster.url,
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
         WHERE application_name = 'factomat' AND ssl",
    );
    assert!(encrypted.trim() != "0", "the replica's connections use TLS");
    drop(replica);
    let rows = rows_of(&verified).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "settled");

    // Each refusal stops start-up with a message that names the setting.
    let by_name = database.replace("127.0.0.1", "localhost");
    for (url, says) in [
        (
            format!("{by_name}?sslmode=verify-full&sslrootcert={ca_file}"),
            vec!["sslmode=verify-full", "certificate"],
        ),
        (
            format!("{database}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
            vec!["sslrootcert=/nonexistent/ca.pem: cannot be read"],
        ),
        (
            format!("{database}?sslmode=disable"),
            vec!["sslmode=disable", "no pg_hba.conf entry", "no encryption"],
        ),
    ] {
        let env = env_for(stack, &facilitator, &rpc, &url);
        let (status, log) = common::replica::failed_start(&pairs(&env)).await;
        assert!(!status.success(), "{url}: {log}");
        for text in says {
            assert!(log.contains(text), "{url}: {text:?} missing from {log}");
        }
    }

    // verify-ca checks the chain, not the name; a certificate from another CA fails it.
    let chain_only = format!("{by_name}?sslmode=verify-ca&sslrootcert={ca_file}");
    let ledger = Ledger::open(&chain_only, PoolOptions::default()).expect("ledger");
    ledger.migrate().await.expect("the chain verifies");
    let stranger = common::https::TestCa::new();
    let wrong_ca = format!(
        "{database}?sslmode=verify-ca&sslrootcert={}",
        stranger.pem_path.display()
    );
    let error = Ledger::open(&wrong_ca, PoolOptions::default())
        .expect("ledger")
        .migrate()
        .await
        .expect_err("another CA's certificate is refused");
    assert!(error.is_refusal(), "{error}");
    // require encrypts without checking the certificate (libpq's meaning).
    let unverified = format!("{by_name}?sslmode=require");
    Ledger::open(&unverified, PoolOptions::default())
        .expect("ledger")
        .migrate()
        .await
        .expect("require does not check the certificate");
}
