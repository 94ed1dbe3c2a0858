//! factomat: bounded, factual, point-in-time observations sold per call over x402 v2.
//!
//! Layout: `machines.yaml` → `build.rs` (checks, renders) → this engine (server, payment
//! gate, gateway) → one module per machine under `machines/`.

pub mod api_error;
pub mod canonical;
pub mod config;
pub mod evm;
pub mod extract;
pub mod facilitator;
pub mod fetch;
pub mod gateway;
pub mod ledger;
pub mod machines;
pub mod manifest;
pub mod page;
pub mod payment;
pub mod render;
pub mod renders;
pub mod report;
pub mod request_checks;
pub mod rpc;
pub mod server;
pub mod token_reads;
pub mod url_policy;
pub mod validation;
pub mod x402;
pub mod x402_probe;
