//! The HTTP edge: the warp server, request bodies, and the mapping of errors to responses.

pub mod admin;
pub mod body;
pub mod error;
pub mod request_id;
pub mod server;
