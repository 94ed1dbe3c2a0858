//! The x402 payment gate: verify, run the work once, settle, and record every attempt.

pub(crate) mod call;
pub(crate) mod cdp_auth;
pub(crate) mod collect;
pub(crate) mod echo;
pub(crate) mod facilitator;
pub(crate) mod gate;
pub mod ledger;
pub(crate) mod listing;
pub(crate) mod local_check;
pub(crate) mod payload;
pub mod reconcile;
pub(crate) mod reconcile_pass;
pub(crate) mod record;
pub mod report;
pub(crate) mod rerun;
pub(crate) mod retained;
pub(crate) mod row_locks;
pub(crate) mod settlement;
pub(crate) mod window;
