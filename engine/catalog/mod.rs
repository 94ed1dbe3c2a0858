//! The manifest's types and everything rendered from it: catalog, OpenAPI, discovery
//! document, docs, the storefront pages, and the x402 challenge.

pub mod challenge;
pub mod embedded;
pub mod manifest;
pub mod render;
pub mod storefront;
