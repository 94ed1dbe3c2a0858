//! The x402 payment gate: verify, run the work once, settle, and record every attempt.

pub mod cdp_auth;
pub mod facilitator;
pub mod gate;
pub mod ledger;
pub mod local_check;
pub mod reconcile;
pub mod report;
