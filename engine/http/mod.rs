//! The HTTP edge: the warp server, request bodies, and the mapping of errors to responses.

pub(crate) mod body;
pub(crate) mod error;
pub mod server;
