//! EVM reads: the JSON-RPC transport, the chains we know, and token reads.

pub(crate) mod authorization;
mod chain_proof;
pub(crate) mod endpoints;
pub(crate) mod networks;
pub(crate) mod rpc;
pub(crate) mod token_reads;

pub use authorization::AuthorizationReader;
