//! Small building blocks every layer may use: canonical JSON and hashes, decimals, EVM value
//! parsing, a TTL cache.

pub mod canonical;
pub mod decimal;
pub mod evm;
pub mod metrics;
pub mod ttl_cache;
