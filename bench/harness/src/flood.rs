//! A partial-head flood: N connections that each send a request line and one header and never
//! finish the head. A connection the server closes (at its header deadline, or shed at the
//! cap) is opened again at once, so N stay pending for the whole hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::BenchError;

#[derive(clap::Args)]
pub struct Args {
    /// factomat's listen address (loopback).
    #[arg(long)]
    addr: SocketAddr,
    /// Partial-head connections kept open.
    #[arg(long, default_value_t = 2000)]
    count: usize,
    /// Seconds to keep the flood up after all are open.
    #[arg(long, default_value_t = 10.0)]
    hold: f64,
}

const PARTIAL_HEAD: &[u8] = b"GET /v1/catalog HTTP/1.1\r\nHost: flood.invalid\r\n";

/// Keeps one partial head pending until `until`; counts each (re)open.
async fn hold_one(addr: SocketAddr, until: Instant, opened: Arc<AtomicU64>) {
    while Instant::now() < until {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        if stream.write_all(PARTIAL_HEAD).await.is_err() {
            continue;
        }
        let mut sink = [0u8; 512];
        // Pending until the server closes it (or answers a shed with 503 and closes).
        loop {
            match tokio::time::timeout_at(until, stream.read(&mut sink)).await {
                Err(_) => return,
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => continue,
            }
        }
        // A shed connection is closed at once: do not hammer the accept loop.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let opened = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.hold);
    let mut tasks = Vec::with_capacity(args.count);
    for _ in 0..args.count {
        tasks.push(tokio::spawn(hold_one(args.addr, until, opened.clone())));
    }
    while opened.load(Ordering::Relaxed) < args.count as u64 {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(BenchError::Setup(format!(
                "only {} of {} flood connections opened",
                opened.load(Ordering::Relaxed),
                args.count
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("READY {}", args.count);
    for task in tasks {
        let _ = task.await;
    }
    println!("OPENED {}", opened.load(Ordering::Relaxed));
    Ok(())
}
