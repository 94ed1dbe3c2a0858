//! The manifest's types and everything rendered from it: catalog, OpenAPI, discovery
//! document, docs, the storefront pages, and the x402 challenge.

pub(crate) mod challenge;
pub mod embedded;
pub(crate) mod manifest;
// build.rs renders with the rest; the engine uses the payment builders and paths.
#[allow(dead_code, unused_imports)]
pub(crate) mod render;
pub mod sample;
// build.rs renders the storefront; the engine serves the committed pages.
#[allow(dead_code, unreachable_pub)]
pub(crate) mod storefront;

pub use manifest::{Machine, Manifest, ManifestError, compile_schema};
pub use render::{RenderError, SAMPLE_MACHINE};
