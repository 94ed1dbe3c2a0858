//! Loopback TCP relays in front of an HTTP/1 server that close a client's connection the way
//! real servers and networks do, with the closing instant certain:
//! * [`closing_idle_connections`]: the server's keep-alive idle timer fires as a client
//!   writes: a request that arrives on a connection after it sat idle for `idle` is read and
//!   dropped with the connection, unanswered. Real servers do this at their
//!   `keepAliveTimeout` (Node's 5 s, the dev stack's facilitator's too).
//! * [`losing_first_answer_to`]: the server reads and acts on a request, and the connection
//!   is reset before its answer reaches the client (a restart, a load balancer's reset).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running relay: its URL and how many requests it dropped.
pub struct Relay {
    /// `http://addr` of the relay.
    pub url: String,
    dropped: Arc<AtomicU64>,
}

impl Relay {
    /// How many requests (or answers) it dropped with their connection.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

/// A relay to `target` (an `http://host:port` URL) that closes idle kept-alive connections
/// as described in the module's documentation.
pub async fn closing_idle_connections(target: &str, idle: Duration) -> Relay {
    start(target, move |client, server, dropped| async move {
        relay(client, server, idle, &dropped).await;
    })
    .await
}

/// A relay to `target` that forwards every request and answer, except the first answer to a
/// request that begins with `request_start` (`b"POST /settle"`): it drops the connection in
/// its place. The server acted on the request; the client hears nothing of it.
pub async fn losing_first_answer_to(target: &str, request_start: &'static [u8]) -> Relay {
    start(target, move |client, server, dropped| async move {
        relay_losing(client, server, request_start, &dropped).await;
    })
    .await
}

/// Accepts on a loopback port and runs `each` on every connection with one of its own to
/// `target` (an `http://ip:port` URL) and the relay's drop count.
async fn start<F, Fut>(target: &str, each: F) -> Relay
where
    F: Fn(TcpStream, TcpStream, Arc<AtomicU64>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let target: SocketAddr = target
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("an http://ip:port target");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let dropped = Arc::new(AtomicU64::new(0));
    let count = dropped.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (each, count) = (each.clone(), count.clone());
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(target).await {
                    each(client, server, count).await;
                }
            });
        }
    });
    Relay { url, dropped }
}

/// Relays both ways until either side closes, or until the client writes after the
/// connection has answered once and then sat idle for `idle`.
async fn relay(mut client: TcpStream, mut server: TcpStream, idle: Duration, dropped: &AtomicU64) {
    let (mut from_client, mut from_server) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut last_answer: Option<Instant> = None;
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => {
                let Ok(n @ 1..) = read else { return };
                if last_answer.is_some_and(|at| at.elapsed() >= idle) {
                    dropped.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                if server.write_all(&from_client[..n]).await.is_err() {
                    return;
                }
            }
            read = server.read(&mut from_server) => {
                let Ok(n @ 1..) = read else { return };
                if client.write_all(&from_server[..n]).await.is_err() {
                    return;
                }
                last_answer = Some(Instant::now());
            }
        }
    }
}

/// Relays both ways until either side closes, or until the server answers the first request
/// (across the relay's connections) that began with `request_start`: then both connections
/// are dropped, the answer unsent.
async fn relay_losing(
    mut client: TcpStream,
    mut server: TcpStream,
    request_start: &[u8],
    dropped: &AtomicU64,
) {
    let (mut from_client, mut from_server) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut asked = false;
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => {
                let Ok(n @ 1..) = read else { return };
                asked |= from_client[..n].starts_with(request_start);
                if server.write_all(&from_client[..n]).await.is_err() {
                    return;
                }
            }
            read = server.read(&mut from_server) => {
                let Ok(n @ 1..) = read else { return };
                if asked && dropped.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    return;
                }
                asked = false;
                if client.write_all(&from_server[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
