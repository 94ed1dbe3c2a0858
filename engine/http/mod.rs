//! The HTTP edge: the warp server, request bodies, and the mapping of errors to responses.

pub mod body;
pub mod error;
pub mod free_docs;
pub mod server;
