//! EVM reads: the JSON-RPC transport, the chains we know, and token reads.

pub mod authorization;
pub mod networks;
pub mod rpc;
pub mod token_reads;
