//! `factomat ledger reconcile`: rows whose settlement outcome is unknown (`reserved` after a
//! crash, `settle_failed` after a settle that errored) are matched against the chain.
//!
//! The authorization used, with its `AuthorizationUsed` event → the buyer paid: the row
//! becomes `settled` with that transaction (cancelled by the payer instead → `expired`).
//! Unused and past `validBefore` by the chain's own clock →
//! it can never be used: the row becomes `expired`. Unused and still valid → left alone
//! (another replica may be settling it right now). Every change is a conditional update from
//! the state that was read, so running it on several replicas at once, or twice, is safe.

use alloy_primitives::{Address, B256};
use serde::Serialize;

use crate::chain::authorization::{AuthorizationFacts, AuthorizationReader};
use crate::pay::ledger::{AttemptRow, Ledger, LedgerError, Resolution};

/// The only network whose RPC endpoint reconciliation reads.
pub const NETWORK: &str = "eip155:8453";

/// One examined row, as `--json` prints it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Examined {
    /// The ledger row id.
    pub id: i64,
    /// The machine id.
    pub machine: String,
    /// The payer address.
    pub payer: String,
    /// The EIP-3009 nonce, when the row kept it.
    pub nonce: Option<String>,
    /// The row's state before reconciliation.
    pub state_before: String,
    /// The row's state after (unchanged when the chain could not tell).
    pub state_after: String,
    /// What the chain showed.
    pub evidence: String,
}

/// What the chain says means for one row.
fn decide(row: &AttemptRow, facts: &AuthorizationFacts) -> (Option<Resolution>, String) {
    let at = format!("block {} (time {})", facts.block, facts.block_timestamp);
    if facts.used {
        return match (&facts.transaction, &facts.canceled_in) {
            (Some(tx), _) => (
                Some(Resolution::Settled {
                    transaction: Some(tx.clone()),
                }),
                format!("authorizationState used at {at}; AuthorizationUsed in transaction {tx}"),
            ),
            (None, Some(tx)) => (
                Some(Resolution::Expired),
                format!(
                    "authorizationState used at {at}; AuthorizationCanceled in transaction {tx}: the payer cancelled it, never charged"
                ),
            ),
            (None, None) => (
                None,
                format!(
                    "authorizationState used at {at} but neither AuthorizationUsed nor AuthorizationCanceled was found in the searched range: left alone, check by hand"
                ),
            ),
        };
    }
    let valid_before = row
        .valid_before
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok());
    match valid_before {
        Some(limit) if facts.block_timestamp >= limit => (
            Some(Resolution::Expired),
            format!("authorizationState unused at {at}, past validBefore {limit}: never charged"),
        ),
        Some(limit) => (
            None,
            format!("authorizationState unused at {at}; still valid until {limit}: left alone"),
        ),
        None => (
            None,
            format!("authorizationState unused at {at}; validBefore unknown: left alone"),
        ),
    }
}

/// Why a row's authorization cannot be asked of the chain.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("network {0} is not reconciled")]
    OtherNetwork(String),
    #[error("the row predates kept nonces: check the payer's transfers by hand")]
    NoNonce,
    #[error("the stored nonce is not 32 bytes of hex")]
    BadNonce,
    #[error("the stored asset is not an address")]
    BadAsset,
    #[error("the stored payer is not an address")]
    BadPayer,
}

fn authorization_of(row: &AttemptRow) -> Result<(Address, Address, B256), Unreadable> {
    if row.network != NETWORK {
        return Err(Unreadable::OtherNetwork(row.network.clone()));
    }
    let nonce = row
        .nonce
        .as_deref()
        .ok_or(Unreadable::NoNonce)?
        .parse::<B256>()
        .map_err(|_| Unreadable::BadNonce)?;
    let asset = row
        .asset
        .parse::<Address>()
        .map_err(|_| Unreadable::BadAsset)?;
    let payer = row
        .payer
        .parse::<Address>()
        .map_err(|_| Unreadable::BadPayer)?;
    Ok((asset, payer, nonce))
}

/// Examines one row and records what the chain says.
async fn examine(
    ledger: &Ledger,
    chain: &AuthorizationReader,
    row: &AttemptRow,
) -> Result<Examined, LedgerError> {
    let (resolution, evidence) = match authorization_of(row) {
        Err(why) => (None, why.to_string()),
        Ok((asset, payer, nonce)) => match chain.read(asset, payer, nonce).await {
            Ok(facts) => decide(row, &facts),
            Err(error) => (None, format!("the chain could not be read: {error}")),
        },
    };
    let mut state_after = row.state.clone();
    let mut evidence = evidence;
    if let Some(resolution) = resolution {
        if ledger
            .resolve(row.id, &row.state, &resolution, &evidence)
            .await?
        {
            state_after = match resolution {
                Resolution::Settled { .. } => "settled".into(),
                Resolution::Expired => "expired".into(),
            };
        } else {
            evidence = format!("{evidence}; another process changed the row first");
            state_after = "changed elsewhere".into();
        }
    }
    Ok(Examined {
        id: row.id,
        machine: row.machine.clone(),
        payer: row.payer.clone(),
        nonce: row.nonce.clone(),
        state_before: row.state.clone(),
        state_after,
        evidence,
    })
}

/// Reconciles every `reserved` and `settle_failed` row.
pub async fn run(
    ledger: &Ledger,
    chain: &AuthorizationReader,
) -> Result<Vec<Examined>, LedgerError> {
    let mut examined = Vec::new();
    for row in ledger.unresolved().await? {
        let entry = examine(ledger, chain, &row).await?;
        tracing::info!(
            attempt = entry.id, before = %entry.state_before, after = %entry.state_after,
            evidence = %entry.evidence, "reconciled"
        );
        examined.push(entry);
    }
    Ok(examined)
}

/// The examined rows as a text table.
pub fn render_text(examined: &[Examined]) -> String {
    if examined.is_empty() {
        return "no reserved or settle_failed rows: nothing to reconcile\n".into();
    }
    let mut out = String::from("id  machine  state before -> after  evidence\n");
    for e in examined {
        out.push_str(&format!(
            "{}  {}  {} -> {}  {}\n",
            e.id, e.machine, e.state_before, e.state_after, e.evidence
        ));
    }
    out
}
