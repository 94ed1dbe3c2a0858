//! Small building blocks every layer may use: canonical JSON and hashes, a borrowed JSON
//! document, the string lists of JSON values, decimals, EVM value parsing, token units,
//! RFC 3339 timestamps, a TTL cache, owner-only secret files, jsonwebtoken signing keys kept
//! parsed.

pub mod canonical;
pub(crate) mod decimal;
pub(crate) mod evm;
pub mod json_doc;
pub(crate) mod json_value;
pub mod jws_keys;
pub(crate) mod metrics;
pub(crate) mod private_file;
pub(crate) mod timestamp;
pub(crate) mod ttl_cache;
pub(crate) mod units;
