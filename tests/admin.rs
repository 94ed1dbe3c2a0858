//! The admin listener: Prometheus metrics that count exactly what happened in a scripted run
//! (parsed by the prometheus-client Python package's parsers), upstream calls by provider
//! (a loopback RPC that answers, a loopback discovery index that fails), /livez, and /readyz
//! following the facilitator as it stops and returns. One test per binary: the metrics are the
//! process's.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use common::devstack::DevStack;
use common::{TestServer, decode_header, repo_root, temp_path, unix_now};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const VM02: &str = "/v1/allowance-exposure";
const VM05: &str = "/v1/discovery-visibility";
const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";

/// A loopback HTTP upstream that answers every request `503`: a provider that is down.
async fn failing_upstream() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
            });
        }
    });
    addr
}

/// A TCP relay in front of the official facilitator that can be stopped and restarted on the
/// same port: "the facilitator is down" without touching the dev stack.
struct Relay {
    addr: SocketAddr,
    upstream: SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Relayed connections: stopping closes them too (a client's pooled connection must not
    /// outlive the "outage").
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut relay = Relay {
            addr,
            upstream,
            task: None,
            connections: Default::default(),
        };
        relay.serve(listener);
        relay
    }

    fn serve(&mut self, listener: TcpListener) {
        let upstream = self.upstream;
        let connections = self.connections.clone();
        self.task = Some(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let relayed = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut all) = connections.lock() {
                    all.push(relayed.abort_handle());
                }
            }
        }));
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Ok(mut all) = self.connections.lock() {
            all.drain(..).for_each(|connection| connection.abort());
        }
    }

    async fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).await.expect("rebind");
        self.serve(listener);
    }
}

/// Every sample of an exposition as (name, labels, value), read by prometheus-client's
/// OpenMetrics parser and, independently, its Prometheus text parser (both must accept it).
fn parse(text: &str) -> Vec<(String, Value, f64)> {
    let python = repo_root().join(".tools/venv/bin/python");
    let program = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as prometheus
text = sys.stdin.read()
samples = [[s.name, s.labels, s.value] for f in openmetrics(text) for s in f.samples]
classic = [[s.name, s.labels, s.value] for f in prometheus(text) for s in f.samples]
assert len(classic) == len(samples), (len(classic), len(samples))
print(json.dumps(samples))
"#;
    let mut child = Command::new(python)
        .args(["-c", program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python from scripts/install-test-tools");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let output = child.wait_with_output().expect("parser ran");
    assert!(
        output.status.success(),
        "the exposition does not parse: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let samples: Vec<(String, Value, f64)> =
        serde_json::from_slice(&output.stdout).expect("samples");
    samples
}

fn value(samples: &[(String, Value, f64)], name: &str, labels: Value) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .as_object()
                    .expect("labels")
                    .iter()
                    .all(|(k, v)| l.get(k) == Some(v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

async fn get(client: &reqwest::Client, url: String) -> (u16, String) {
    let response = client.get(url).send().await.expect("answered");
    let status = response.status().as_u16();
    (status, response.text().await.expect("text"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_scripted_run_and_readyz_follows_the_facilitator() {
    let stack = DevStack::start();
    let facilitator: url::Url = stack.field("facilitator_url").parse().expect("url");
    let upstream = facilitator
        .socket_addrs(|| None)
        .expect("addr")
        .into_iter()
        .next()
        .expect("one");
    let mut relay = Relay::start(upstream).await;
    let relay_url = format!("http://{}", relay.addr);
    let pay_to = stack.field("pay_to");
    let rpc = stack.field("rpc_url");
    let ledger = format!("sqlite:{}", temp_path("ledger.db").display());
    let discovery = failing_upstream().await;
    let discovery_url = format!("http://{discovery}/platform/v2/x402");
    let server = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", pay_to.as_str()),
        ("FACTOMAT_FACILITATOR_URL", relay_url.as_str()),
        ("FACTOMAT_RPC_URL_EIP155_8453", rpc.as_str()),
        ("FACTOMAT_DATABASE_URL", ledger.as_str()),
        ("FACTOMAT_DISCOVERY_URL", discovery_url.as_str()),
        ("FACTOMAT_ADMIN_LISTEN", "127.0.0.1:0"),
        ("FACTOMAT_FACILITATOR_VERIFY_TIMEOUT_MS", "2000"),
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
    ])
    .await;
    let admin = server.admin_url();
    let client = server.client.clone();
    assert_eq!(get(&client, format!("{admin}/livez")).await.0, 200);
    let (status, body) = get(&client, format!("{admin}/readyz")).await;
    assert_eq!(status, 200, "{body}");
    // Nothing of the admin listener is on the public port, and nothing public on it.
    assert_eq!(server.get("/metrics").await.status().as_u16(), 404);
    assert_eq!(get(&client, format!("{admin}/v1/catalog")).await.0, 404);
    // The admin /health is the operator view, not the public health document.
    let (status, view) = get(&client, format!("{admin}/health")).await;
    assert_eq!(status, 200, "{view}");

    let buyer = stack.field("buyer_address");
    let request = json!({"owner": buyer, "token": USDC, "spender": pay_to});
    let challenge = |response: reqwest::Response| {
        assert_eq!(response.status().as_u16(), 402);
        response.headers()["payment-required"]
            .to_str()
            .expect("ascii")
            .to_string()
    };
    let send_to = |path: &'static str, body: Value, header: String| {
        let (client, url) = (client.clone(), format!("{}{path}", server.url));
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .header("PAYMENT-SIGNATURE", header)
                .json(&body)
                .send()
                .await
                .expect("answered")
                .status()
                .as_u16()
        }
    };
    let send = |header: String| send_to(VM02, request.clone(), header);
    // 2 challenges, 1 bad request.
    let required = challenge(server.post_json(VM02, &request).await);
    challenge(server.post_json(VM02, &request).await);
    let bad = server.post_json(VM02, &json!({"owner": "0x1"})).await;
    assert_eq!(bad.status().as_u16(), 400);
    // 1 paid and settled, collected again, its replay on another request rejected, 1 corrupt
    // signature rejected by the facilitator.
    let good = stack.payment_header(&required, &[]);
    assert_eq!(send(good.clone()).await, 200);
    assert_eq!(
        send(good.clone()).await,
        200,
        "the same request collects again"
    );
    let permit2 = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
    let another = json!({"owner": buyer, "token": USDC, "spender": permit2});
    assert_eq!(send_to(VM02, another.clone(), good.clone()).await, 402);
    // The same authorization again once its validBefore has passed: refused on its own terms
    // (the window), then answered by its nonce (presented); one 402, counted once.
    let nonce = decode_header(&good)["payload"]["authorization"]["nonce"]
        .as_str()
        .expect("nonce")
        .to_string();
    let past = (unix_now() - 60).to_string();
    let late = stack.payment_header(&required, &["--nonce", &nonce, "--valid-before", &past]);
    assert_eq!(send_to(VM02, another, late).await, 402);
    let corrupt = stack.payment_header(&required, &["--corrupt-signature"]);
    assert_eq!(send(corrupt).await, 402);
    assert_eq!(
        decode_header(&required)["accepts"][0]["payTo"],
        pay_to,
        "the challenge is ours"
    );
    // 1 paid VM05 call whose discovery index is down: a truthful HOLD, settled.
    let listing = json!({
        "resource": "https://api.seller.example/v1/weather",
        "pay_to": "0x7d9e3a1c5b2f4e6a8c0d1e2f3a4b5c6d7e8f9a0b",
        "queries": ["weather api"],
    });
    let listing_terms = challenge(server.post_json(VM05, &listing).await);
    let paid = stack.payment_header(&listing_terms, &[]);
    assert_eq!(send_to(VM05, listing, paid).await, 200);
    // The facilitator goes away: 1 paid attempt answers 503, and /readyz turns not-ready.
    relay.stop();
    let stranded = stack.payment_header(&required, &[]);
    assert_eq!(send(stranded).await, 503);
    tokio::time::sleep(factomat::http::READY_CACHE).await;
    let (status, body) = get(&client, format!("{admin}/readyz")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["facilitator"],
        "unreachable"
    );
    relay.restart().await;
    tokio::time::sleep(factomat::http::READY_CACHE).await;
    let (status, body) = get(&client, format!("{admin}/readyz")).await;
    assert_eq!(
        status, 200,
        "ready again once the facilitator returns: {body}"
    );

    let (status, text) = get(&client, format!("{admin}/metrics")).await;
    assert_eq!(status, 200);
    let samples = parse(&text);
    let requests = |status: &str| {
        value(
            &samples,
            "factomat_http_requests_total",
            json!({"machine": "VM02", "status": status}),
        )
    };
    assert_eq!(
        requests("402"),
        5.0,
        "2 challenges + 3 rejected payments\n{text}"
    );
    assert_eq!(requests("400"), 1.0);
    assert_eq!(requests("200"), 2.0, "paid, then collected again");
    assert_eq!(requests("503"), 1.0);
    let payments = |outcome: &str| {
        value(
            &samples,
            "factomat_payments_total",
            json!({"outcome": outcome}),
        )
    };
    assert_eq!(payments("challenged"), 3.0, "2 VM02 + 1 VM05\n{text}");
    assert_eq!(payments("verified"), 2.0);
    assert_eq!(payments("settled"), 2.0);
    assert_eq!(payments("rejected"), 3.0, "one count per 402\n{text}");
    assert_eq!(payments("settle_failed"), 0.0);
    assert_eq!(payments("work_failed"), 0.0);
    let retained = |event: &str| {
        value(
            &samples,
            "factomat_retained_answers_total",
            json!({"event": event}),
        )
    };
    assert_eq!(
        retained("retained"),
        2.0,
        "the VM02 and VM05 answers\n{text}"
    );
    assert_eq!(retained("collected"), 1.0);
    assert_eq!(
        value(
            &samples,
            "factomat_payments_total",
            json!({"outcome": "rejected", "reason": "payment_nonce_already_presented"})
        ),
        2.0
    );
    let calls = |endpoint: &str, result: &str| {
        value(
            &samples,
            "factomat_provider_calls_total",
            json!({"provider": "facilitator", "endpoint": endpoint, "result": result}),
        )
    };
    // verify: the paid call (the corrupt signature is refused locally before /verify);
    // settle: the paid call; the stranded verify failed; supported: one readiness check failed.
    assert_eq!(calls("verify", "ok"), 2.0, "{text}");
    assert_eq!(calls("verify", "error"), 1.0);
    assert_eq!(calls("settle", "ok"), 2.0);
    assert_eq!(calls("supported", "error"), 1.0);
    assert_eq!(
        value(
            &samples,
            "factomat_provider_call_duration_seconds_count",
            json!({"provider": "facilitator", "endpoint": "settle"})
        ),
        2.0
    );
    // Every upstream is counted at the gateway under its provider name: VM02's reads reached
    // the loopback RPC (anvil) as rpc_base; VM05's merchant and search reads hit the failing
    // index as discovery_index errors.
    let provider_calls = |provider: &str, result: &str| {
        value(
            &samples,
            "factomat_provider_calls_total",
            json!({"provider": provider, "result": result}),
        )
    };
    let rpc_ok = provider_calls("rpc_base", "ok");
    assert!(rpc_ok >= 1.0, "VM02 read the RPC\n{text}");
    assert_eq!(provider_calls("rpc_base", "error"), 0.0);
    assert_eq!(
        value(
            &samples,
            "factomat_provider_call_duration_seconds_count",
            json!({"provider": "rpc_base", "endpoint": "json_rpc"})
        ),
        rpc_ok,
        "one latency observation per RPC call"
    );
    for endpoint in ["merchant", "search"] {
        assert_eq!(
            value(
                &samples,
                "factomat_provider_calls_total",
                json!({"provider": "discovery_index", "endpoint": endpoint, "result": "error"})
            ),
            1.0,
            "{endpoint}\n{text}"
        );
    }
    assert_eq!(provider_calls("discovery_index", "ok"), 0.0);
    assert_eq!(
        value(
            &samples,
            "factomat_ledger_rows",
            json!({"state": "settled"})
        ),
        2.0
    );
    assert_eq!(
        value(&samples, "factomat_paid_calls_in_flight", json!({})),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "factomat_build_info",
            json!({"version": env!("CARGO_PKG_VERSION")})
        ),
        1.0
    );
    let rpc_port = url::Url::parse(&rpc)
        .expect("rpc url")
        .port()
        .expect("port");
    let ports = [
        relay.addr.port(),
        upstream.port(),
        discovery.port(),
        rpc_port,
    ];
    for (_, labels, _) in &samples {
        let text = labels.to_string();
        assert!(
            !text.contains("127.0.0.1") && !text.contains("http") && !text.contains("localhost"),
            "no URL or host in a label: {text}"
        );
        for port in ports {
            assert!(
                !text.contains(&port.to_string()),
                "no port in a label: {text}"
            );
        }
    }
}
