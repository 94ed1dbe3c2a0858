//! Idle keep-alive connections: open N connections, make one request on each so the server
//! has accepted and served them, then keep them open and silent while the script reads the
//! server's memory.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::BenchError;

#[derive(clap::Args)]
pub struct Args {
    /// factomat's listen address (loopback).
    #[arg(long)]
    addr: SocketAddr,
    /// Number of connections.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Path requested once on each connection.
    #[arg(long, default_value = "/health")]
    path: String,
    /// Seconds to hold the connections after all are open.
    #[arg(long, default_value_t = 5.0)]
    hold: f64,
}

async fn open(addr: SocketAddr, request: &[u8]) -> Result<TcpStream, BenchError> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| BenchError::Io(format!("connect {addr}"), e))?;
    stream
        .write_all(request)
        .await
        .map_err(|e| BenchError::Io("write".into(), e))?;
    // The answer is small: one read returns its head, which is all that matters here.
    let mut buffer = [0u8; 8192];
    let n = stream
        .read(&mut buffer)
        .await
        .map_err(|e| BenchError::Io("read".into(), e))?;
    if !buffer[..n].starts_with(b"HTTP/1.1 200") {
        return Err(BenchError::Setup(
            "a connection was not answered 200".into(),
        ));
    }
    Ok(stream)
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n\r\n",
        args.path, args.addr
    );
    let mut streams = Vec::with_capacity(args.count);
    for _ in 0..args.count {
        streams.push(open(args.addr, request.as_bytes()).await?);
    }
    println!("READY {}", streams.len());
    tokio::time::sleep(Duration::from_secs_f64(args.hold)).await;
    drop(streams);
    Ok(())
}
