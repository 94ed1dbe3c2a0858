//! Hostile clients on real loopback sockets: partial heads, a flood beyond the connection cap,
//! a dripping paid body, idle keep-alive connections (at their deadline and at a stop), and
//! forged payments that must never
//! reach the facilitator. Counts and deadlines are lowered so each test stays short.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::devstack::DevStack;
use common::logs::{capture, logs};
use common::onchain::serve;
use common::paid_rig::reason_of;
use common::{TestServer, decode_header, temp_path};
use factomat::pay::ledger::{Ledger, PoolOptions};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warp::Filter;

const VM02: &str = "/v1/allowance-exposure";
const PARTIAL_HEAD: &[u8] = b"GET /health HTTP/1.1\r\nHost: factomat.test\r\n";

async fn partial_head(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // A shed connection may already be closed: the write's outcome does not matter.
    let _ = stream.write_all(PARTIAL_HEAD).await;
    stream
}

/// Whether the server closed the connection (EOF or reset) before `deadline`, reading and
/// discarding whatever it sent first.
async fn closed_by(stream: &mut TcpStream, deadline: tokio::time::Instant) -> bool {
    let mut buffer = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

fn counter(value: &AtomicU64) -> u64 {
    value.load(Ordering::Relaxed)
}

async fn health_within(server: &TestServer, limit: Duration) -> u16 {
    let answer = tokio::time::timeout(
        limit,
        server.client.get(format!("{}/health", server.url)).send(),
    )
    .await
    .expect("a legitimate request is answered in time")
    .expect("answered");
    answer.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_heads_are_closed_at_the_header_deadline_and_health_is_answered_meanwhile() {
    capture();
    let server = TestServer::with_env(&[
        ("FACTOMAT_HEADER_READ_TIMEOUT_MS", "1000"),
        ("FACTOMAT_MAX_CONNECTIONS", "3000"),
    ])
    .await;
    let addr = server.server.addr;
    let mut flood = Vec::with_capacity(2000);
    for i in 0..2000 {
        flood.push(partial_head(addr).await);
        if i == 1000 {
            assert_eq!(health_within(&server, Duration::from_secs(2)).await, 200);
        }
    }
    let opened = tokio::time::Instant::now();
    // Every connection was opened before `opened`: all are past their deadline 1 s later.
    let deadline = opened + Duration::from_millis(1000) + Duration::from_secs(2);
    let mut closed = 0;
    for stream in &mut flood {
        closed += usize::from(closed_by(stream, deadline).await);
    }
    assert_eq!(closed, 2000, "every partial head is closed by the server");
    let counters = &server.server.state.connections;
    assert!(counter(&counters.header_timeouts) >= 2000);
    assert_eq!(counter(&counters.shed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_cap_connections_are_shed_cheaply_and_service_comes_back() {
    capture();
    let server = TestServer::with_env(&[
        ("FACTOMAT_HEADER_READ_TIMEOUT_MS", "3000"),
        ("FACTOMAT_MAX_CONNECTIONS", "300"),
    ])
    .await;
    let addr = server.server.addr;
    let started = tokio::time::Instant::now();
    let mut flood = Vec::with_capacity(1000);
    for _ in 0..1000 {
        flood.push(partial_head(addr).await);
    }
    // Shed connections are closed at once; served ones wait for their head until 3 s.
    let look_until = (started + Duration::from_millis(2500))
        .max(tokio::time::Instant::now() + Duration::from_millis(300));
    let mut checks = Vec::new();
    for mut stream in flood {
        checks.push(tokio::spawn(async move {
            let closed = closed_by(&mut stream, look_until).await;
            (closed, stream)
        }));
    }
    let mut held = Vec::new();
    for check in checks {
        let (closed, stream) = check.await.expect("check");
        if !closed {
            held.push(stream);
        }
    }
    assert!(
        started.elapsed() < Duration::from_millis(3000) || !held.is_empty(),
        "the machine was too slow to observe the held connections before their deadline"
    );
    assert!(
        held.len() <= 300,
        "{} connections served beyond a cap of 300",
        held.len()
    );
    let counters = &server.server.state.connections;
    assert!(counter(&counters.accepted) <= 300);
    assert!(counter(&counters.shed) >= 700);
    // Once the held heads pass their deadline, a legitimate request is served again.
    tokio::time::sleep_until(started + Duration::from_millis(3000)).await;
    // A shed attempt may see the 503 or a closed socket, so it is retried briefly.
    let mut status = 0;
    for _ in 0..20 {
        let attempt = tokio::time::timeout(
            Duration::from_secs(2),
            server.client.get(format!("{}/health", server.url)).send(),
        )
        .await;
        status = match attempt {
            Ok(Ok(response)) => response.status().as_u16(),
            _ => 0,
        };
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, 200, "served again after the deadline");
    // The held ones hang up too; none of this is an ERROR, and the log stays short.
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = logs();
    let connection_lines = logs
        .lines()
        .filter(|l| l.contains("factomat::http::connections"))
        .filter(|l| !l.contains("DEBUG") && !l.contains("TRACE"))
        .count();
    assert!(
        (1..=6).contains(&connection_lines),
        "{connection_lines} connection log lines above debug for a 1000-connection flood"
    );
    assert!(
        !logs.lines().any(|l| l.contains(" ERROR ")),
        "no client behaviour is logged at ERROR"
    );
}

/// A loopback facilitator that counts `/verify` and `/settle`, forwarding them to `real`
/// when given, else refusing every payment.
async fn counting_facilitator(real: Option<String>) -> (SocketAddr, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let client = reqwest::Client::new();
    let step = warp::path::param::<String>()
        .and(warp::post())
        .and(warp::body::bytes())
        .then(move |step: String, body: bytes::Bytes| {
            counted.fetch_add(1, Ordering::SeqCst);
            let (client, real) = (client.clone(), real.clone());
            async move {
                let answer = match real {
                    Some(real) => client
                        .post(format!("{real}/{step}"))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .expect("real facilitator")
                        .bytes()
                        .await
                        .expect("body"),
                    None => bytes::Bytes::from(
                        json!({"isValid": false, "invalidReason": "counted_by_test"}).to_string(),
                    ),
                };
                http::Response::builder()
                    .header("content-type", "application/json")
                    .body(answer)
                    .expect("response")
            }
        });
    let supported = warp::path!("supported").map(|| {
        warp::reply::json(
            &json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}),
        )
    });
    (serve(supported.or(step)).await, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_paid_body_is_cut_at_its_deadline_and_nothing_is_verified() {
    capture();
    let (facilitator, calls) = counting_facilitator(None).await;
    let ledger_url = format!("sqlite:{}", temp_path("ledger.db").display());
    let server = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", common::PAY_TO),
        ("FACTOMAT_FACILITATOR_URL", &format!("http://{facilitator}")),
        ("FACTOMAT_RPC_URL_EIP155_8453", "http://127.0.0.1:9"),
        ("FACTOMAT_DATABASE_URL", &ledger_url),
        ("FACTOMAT_BODY_READ_TIMEOUT_MS", "1000"),
    ])
    .await;
    let mut stream = TcpStream::connect(server.server.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST {VM02} HTTP/1.1\r\nHost: factomat.test\r\nContent-Type: application/json\r\n\
         Content-Length: 200\r\nPAYMENT-SIGNATURE: eyJ4NDAyVmVyc2lvbiI6Mn0=\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let started = Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    let drip = tokio::spawn(async move {
        for byte in b"{\"owner\":\"0x".iter().cycle().take(200) {
            if writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut answer = Vec::new();
    let read_all = tokio::time::timeout(Duration::from_secs(4), reader.read_to_end(&mut answer));
    let outcome = read_all
        .await
        .expect("the server answers and closes within 4 s");
    drip.abort();
    let text = String::from_utf8_lossy(&answer);
    assert!(outcome.is_ok() || !answer.is_empty(), "{outcome:?}");
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert!(text.contains("body_timeout"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing was verified");
    let rows = Ledger::open(&ledger_url, PoolOptions::default())
        .expect("ledger")
        .rows()
        .await
        .expect("rows");
    assert!(rows.is_empty(), "nothing was reserved or charged");
    assert_eq!(counter(&server.server.state.connections.body_timeouts), 1);
}

/// A keep-alive connection that has been answered `GET /health` and is now idle.
async fn kept_alive_after_health(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: factomat.test\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer))
            .await
            .expect("answered")
            .expect("read");
        assert!(n > 0, "closed before the response was complete");
        answer.extend_from_slice(&buffer[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 "));
    stream
}

/// The stop signal reaches a connection that has served requests and sits idle: the server
/// closes it and stops at once, not at the idle deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_closes_idle_keep_alive_connections_at_once() {
    let server = TestServer::with_env(&[("FACTOMAT_IDLE_TIMEOUT_MS", "60000")]).await;
    let mut first = kept_alive_after_health(server.server.addr).await;
    let mut second = kept_alive_after_health(server.server.addr).await;
    let stopping = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), server.server.stop())
        .await
        .expect("the server stops while connections sit idle");
    let soon = tokio::time::Instant::now() + Duration::from_secs(2);
    assert!(
        closed_by(&mut first, soon).await,
        "the first idle connection is closed"
    );
    assert!(
        closed_by(&mut second, soon).await,
        "the second idle connection is closed"
    );
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopping.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    capture();
    let server = TestServer::with_env(&[
        ("FACTOMAT_IDLE_TIMEOUT_MS", "1000"),
        ("FACTOMAT_HEADER_READ_TIMEOUT_MS", "5000"),
    ])
    .await;
    let mut stream = kept_alive_after_health(server.server.addr).await;
    let served = Instant::now();
    let closed = closed_by(
        &mut stream,
        tokio::time::Instant::now() + Duration::from_secs(4),
    )
    .await;
    assert!(closed, "the idle connection is closed");
    let idle = served.elapsed();
    assert!(
        idle >= Duration::from_millis(900),
        "kept alive for {idle:?} only"
    );
    assert_eq!(counter(&server.server.state.connections.idle_closed), 1);
}

fn pseudo_random(seed: u64, salt: &str) -> [u8; 32] {
    Sha256::digest(format!("{salt}-{seed}")).into()
}

/// A payment with the right shape, payee, price and window, and a signature of random bytes.
fn forged_payment(accepted: &Value, seed: u64) -> String {
    let from = &pseudo_random(seed, "from")[..20];
    let mut signature = pseudo_random(seed, "r").to_vec();
    signature.extend_from_slice(&pseudo_random(seed, "s"));
    signature.push(27);
    let valid_before = common::unix_now() + 60;
    let payload = json!({
        "x402Version": 2,
        "payload": {
            "signature": format!("0x{}", alloy_primitives::hex::encode(&signature)),
            "authorization": {
                "from": format!("0x{}", alloy_primitives::hex::encode(from)),
                "to": accepted["payTo"],
                "value": accepted["amount"],
                "validAfter": "0",
                "validBefore": valid_before.to_string(),
                "nonce": format!("0x{}", alloy_primitives::hex::encode(pseudo_random(seed, "nonce"))),
            }
        },
        "accepted": accepted,
    });
    base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        payload.to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_payments_never_reach_the_facilitator_and_real_ones_still_settle() {
    capture();
    let stack = DevStack::start();
    let (facilitator, calls) = counting_facilitator(Some(stack.field("facilitator_url"))).await;
    let pay_to = stack.field("pay_to");
    let server = Arc::new(
        TestServer::with_env(&[
            ("FACTOMAT_PAY_TO", pay_to.as_str()),
            ("FACTOMAT_FACILITATOR_URL", &format!("http://{facilitator}")),
            ("FACTOMAT_RPC_URL_EIP155_8453", &stack.field("rpc_url")),
        ])
        .await,
    );
    let body = json!({
        "owner": stack.field("buyer_address"),
        "token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "spender": pay_to,
    });
    let (required, _) = server.challenge(VM02, &body).await;
    let accepted = decode_header(&required)["accepts"][0].clone();
    let send = |server: Arc<TestServer>, header: String, body: Value| async move {
        server.post_paid(VM02, &body, &header).await
    };
    let mut workers = Vec::new();
    for worker in 0..8u64 {
        let (server, accepted, body) = (server.clone(), accepted.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            for seed in (worker * 125)..((worker + 1) * 125) {
                let response = send(
                    server.clone(),
                    forged_payment(&accepted, seed),
                    body.clone(),
                )
                .await;
                assert_eq!(response.status().as_u16(), 402);
                assert_eq!(reason_of(&response), "invalid_exact_evm_signature");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("forged payments answered");
    }
    let past = (common::unix_now() - 100).to_string();
    for (mutation, reason) in [
        (
            vec!["--to", "0x90F79bf6EB2c4f870365E785982E1f101E93b906"],
            "invalid_exact_evm_recipient_mismatch",
        ),
        (
            vec!["--signed-value", "5000"],
            "invalid_exact_evm_payload_authorization_value_mismatch",
        ),
        (
            vec!["--valid-before", past.as_str()],
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
    ] {
        let header = stack.sign(&required, &mutation)["header"]
            .as_str()
            .expect("header")
            .to_string();
        let response = send(server.clone(), header, body.clone()).await;
        assert_eq!(response.status().as_u16(), 402, "{mutation:?}");
        assert_eq!(reason_of(&response), reason, "{mutation:?}");
    }
    // Two real payments in one request: which one is meant is not ours to guess.
    let two = server
        .client
        .post(format!("{}{VM02}", server.url))
        .header(
            "PAYMENT-SIGNATURE",
            stack.sign(&required, &[])["header"]
                .as_str()
                .expect("header"),
        )
        .header(
            "PAYMENT-SIGNATURE",
            stack.sign(&required, &[])["header"]
                .as_str()
                .expect("header"),
        )
        .json(&body)
        .send()
        .await
        .expect("answered");
    common::expect_400(two, "duplicate_payment_header", "two payments").await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no forged or doubled payment cost a facilitator call"
    );
    assert_eq!(server.server.state.payments_refused_locally(), 1003);
    // A smart-wallet-sized signature cannot be checked here: the facilitator decides.
    let mut wallet: Value = serde_json::from_slice(
        &base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            forged_payment(&accepted, 5000),
        )
        .expect("base64"),
    )
    .expect("json");
    wallet["payload"]["signature"] = json!(format!("0x{}", "ab".repeat(100)));
    let header = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        wallet.to_string(),
    );
    let response = send(server.clone(), header, body.clone()).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "deferred to the facilitator's /verify"
    );
    // The official client's real payment still goes through /verify and /settle.
    let paid = stack.pay(&format!("{}{VM02}", server.url), &body);
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "one /verify and one /settle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_at_the_response_write_deadline() {
    capture();
    let server = TestServer::with_env(&[("FACTOMAT_RESPONSE_WRITE_TIMEOUT_MS", "1000")]).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("small receive buffer");
    let mut stream = socket.connect(server.server.addr).await.expect("connect");
    // 40 pipelined requests for the 230 KB OpenAPI document: far more than the socket
    // buffers hold, and this client reads none of it.
    let requests = b"GET /openapi.json HTTP/1.1\r\nHost: factomat.test\r\n\r\n".repeat(40);
    stream.write_all(&requests).await.expect("requests");
    let started = Instant::now();
    let counters = &server.server.state.connections;
    while counter(&counters.write_timeouts) == 0 && started.elapsed() < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        counter(&counters.write_timeouts),
        1,
        "the stalled write was cut"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    let closed = closed_by(
        &mut stream,
        tokio::time::Instant::now() + Duration::from_secs(5),
    )
    .await;
    assert!(
        closed,
        "the connection is closed once the buffered bytes are read"
    );
}
