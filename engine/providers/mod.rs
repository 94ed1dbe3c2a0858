//! Adapters of the data providers the on-chain machines read. Each adapter has explicit
//! timeouts and size limits (given by its caller from the manifest), reads only through the
//! counted gateway, and describes its failures without the configured URL.
//!
//! - `aave`: Aave v3 reserve rates, on chain at one block (VM04).
//! - `lido`: the Lido API's stETH APR (VM04).
//! - `inventory`: `alchemy_getTokenBalances` pagination (VM03).
//! - `dexscreener`: DEX pair prices (VM03).
//! - `erc20`: same-block balances and metadata of many tokens through Multicall3 (VM03).

pub(crate) mod aave;
pub(crate) mod dexscreener;
pub(crate) mod discovery;
pub(crate) mod erc20;
pub(crate) mod inventory;
pub(crate) mod lido;
