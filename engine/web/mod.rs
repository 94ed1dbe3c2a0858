//! The web: the bounded page fetcher, main-text extraction, and the x402 seller probe.

mod boilerplate;
pub(crate) mod extract;
pub mod fetch;
pub mod page;
mod text;
pub(crate) mod x402_probe;
