//! A loopback TCP relay in front of an HTTP/1 server whose keep-alive idle timer fires as a
//! client writes: a request that arrives on a connection after it sat idle for `idle` is
//! read and dropped with the connection, unanswered. Real servers do this at their
//! `keepAliveTimeout` (Node's 5 s, the dev stack's facilitator's too); here the timer is
//! short and the closing instant certain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running relay: its URL and how many requests it dropped.
pub struct IdleTimer {
    /// `http://addr` of the relay.
    pub url: String,
    dropped: Arc<AtomicU64>,
}

impl IdleTimer {
    /// How many requests arrived on an idle connection and were dropped with it.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

/// A relay to `target` (an `http://host:port` URL) that closes idle kept-alive connections
/// as described in the module's documentation.
pub async fn closing_idle_connections(target: &str, idle: Duration) -> IdleTimer {
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
            let count = count.clone();
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(target).await {
                    relay(client, server, idle, &count).await;
                }
            });
        }
    });
    IdleTimer { url, dropped }
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
