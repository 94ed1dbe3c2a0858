//! factomat: bounded, factual, point-in-time observations sold per call over x402 v2.
//!
//! Layout: `machines.yaml` → `build.rs` (checks, renders) → this engine (server, payment
//! gate, gateway) → one module per machine under `machines/`.

pub mod api_error;
pub mod bounded_json;
pub mod canonical;
pub mod chains;
pub mod config;
pub mod decimal;
pub mod discovery;
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
pub mod providers;
pub mod render;
pub mod renders;
pub mod report;
pub mod request_checks;
pub mod rpc;
pub mod server;
pub mod token_reads;
pub mod ttl_cache;
pub mod upstream;
pub mod url_policy;
pub mod validation;
pub mod x402;
pub mod x402_probe;
