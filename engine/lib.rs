//! factomat: bounded, factual, point-in-time observations sold per call over x402 v2.
//!
//! Layout (see docs/architecture.md): `machines.yaml` → `build.rs` (checks, renders) → this
//! engine, in layers that import only downward: `http` → `pay` → `machines` →
//! `providers`/`web`/`chain` → `net`, with `catalog`, `config` and `support` at the bottom.

pub mod catalog;
pub mod chain;
pub mod config;
pub mod http;
pub mod machines;
pub mod net;
pub mod pay;
pub mod providers;
pub mod support;
pub mod web;
