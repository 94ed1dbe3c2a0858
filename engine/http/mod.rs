//! The HTTP edge: the connection loop, the routes, request bodies, and the mapping of errors to responses.

pub(crate) mod admin;
pub(crate) mod body;
pub(crate) mod connections;
pub(crate) mod error;
pub(crate) mod free_docs;
pub(crate) mod request_id;
pub(crate) mod response;
pub(crate) mod sealed;
pub(crate) mod state;

pub use admin::READY_CACHE;
pub mod server;
