//! The web: the bounded page fetcher, main-text extraction, the x402 seller probe, and the
//! discovery preflight (`factomat discovery check`).

mod boilerplate;
pub mod discovery_check;
pub(crate) mod extract;
pub mod fetch;
pub mod page;
mod text;
pub(crate) mod x402_probe;
