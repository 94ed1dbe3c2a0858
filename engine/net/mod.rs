//! Outbound network: the one counted gateway, bounded reads, and the URL policy.

pub(crate) mod bounded_json;
pub mod gateway;
pub(crate) mod upstream;
pub mod url_policy;
