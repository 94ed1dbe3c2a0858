//! factomat: bounded, factual, point-in-time observations sold per call over x402 v2.
//!
//! Layout (see docs/architecture.md): `machines.yaml` → `build.rs` (checks, renders) → this
//! engine, in layers that import only downward: `http` → `pay` → `machines` →
//! `providers`/`web`/`chain` → `net`, with `catalog`, `config` and `evidence` above `support` at the bottom.

//!
//! The public surface is what the binary and the integration tests use; everything else is
//! private to its layer.

pub mod catalog;
pub mod chain;
pub mod config;
pub mod evidence;
pub mod http;
pub mod machines;
pub mod net;
pub mod pay;
pub(crate) mod providers;
pub mod support;
pub mod web;
