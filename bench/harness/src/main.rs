//! factomat's benchmark tools. Every server here binds 127.0.0.1 only; every client talks
//! to 127.0.0.1 only. Driven by `bench/run`.

mod ceiling;
mod flood;
mod idle;
mod paid_load;
mod stubs;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "factomat-bench",
    about = "Benchmark tools for factomat (loopback only)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bare warp server answering every request with one fixed response (the ceiling).
    Ceiling {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Status code of the fixed response.
        #[arg(long, default_value_t = 402)]
        status: u16,
        /// File of `name: value` lines: the fixed response headers.
        #[arg(long)]
        headers: PathBuf,
        /// File holding the fixed response body.
        #[arg(long)]
        body: PathBuf,
    },
    /// A facilitator that accepts every payment at once (GET /supported, POST /verify, /settle).
    Facilitator {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// An instant JSON-RPC endpoint for eth_blockNumber, eth_call (ERC-20 reads), eth_getCode.
    Rpc {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// Load generator for the paid path: unique EIP-3009 nonce per request; prints JSON.
    PaidLoad(paid_load::Args),
    /// Opens N keep-alive connections, makes one request on each, then holds them idle.
    Idle(idle::Args),
    /// Holds N connections that never finish their request head, reopening closed ones.
    Flood(flood::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("factomat-bench: runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Ceiling {
                listen,
                status,
                headers,
                body,
            } => ceiling::serve(listen, status, &headers, &body).await,
            Command::Facilitator { listen } => stubs::facilitator(listen).await,
            Command::Rpc { listen } => stubs::rpc(listen).await,
            Command::PaidLoad(args) => paid_load::run(args).await,
            Command::Idle(args) => idle::run(args).await,
            Command::Flood(args) => flood::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("factomat-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Everything that can stop a tool.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    Setup(String),
}

/// Binds, prints `LISTENING http://ADDR` (the script reads it) and serves forever.
pub async fn serve_forever<F>(listen: SocketAddr, routes: F) -> Result<(), BenchError>
where
    F: warp::Filter + Clone + Send + Sync + 'static,
    F::Extract: warp::Reply,
{
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| BenchError::Io(format!("bind {listen}"), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::Io("local_addr".into(), e))?;
    println!("LISTENING http://{addr}");
    warp::serve(routes).incoming(listener).run().await;
    Ok(())
}
