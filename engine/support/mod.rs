//! Small building blocks every layer may use: canonical JSON and hashes, decimals, EVM value
//! parsing, token units, RFC 3339 timestamps, a TTL cache.

pub mod canonical;
pub mod decimal;
pub mod evm;
pub mod timestamp;
pub mod ttl_cache;
pub mod units;
