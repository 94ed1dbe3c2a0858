//! Outbound network: the one counted gateway, bounded reads, and the URL policy.

pub mod bounded_json;
pub mod gateway;
pub mod upstream;
pub mod url_policy;
