//! The renders build.rs produced from machines.yaml, embedded at compile time.

use std::sync::LazyLock;

use crate::catalog::manifest::Manifest;

include!(concat!(env!("OUT_DIR"), "/renders.rs"));

static MANIFEST_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/manifest.json"));

/// The manifest the build checked. Parsing it cannot fail for a binary that built, since
/// build.rs serialized this exact value.
pub static MANIFEST: LazyLock<Manifest> = LazyLock::new(|| {
    serde_json::from_str(MANIFEST_JSON).expect("build.rs embedded a manifest it had checked")
});

/// The embedded render of a committed path, if there is one.
pub fn render(path: &str) -> Option<&'static str> {
    RENDERS.iter().find(|(p, _)| *p == path).map(|(_, c)| *c)
}
