//! The HTTP edge: the connection loop, the warp routes, request bodies, and the mapping of errors to responses.

pub mod body;
pub mod connections;
pub mod error;
pub mod free_docs;
pub mod server;
