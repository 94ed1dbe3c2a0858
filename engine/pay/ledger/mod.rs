//! The settlement ledger: one row per paid attempt, so nothing paid is lost and nothing is
//! charged twice.
//!
//! A row holds what accounting needs and nothing a buyer would not want kept: never a
//! response body, a purchased page, the raw payment payload or its signature. The nonce's
//! sha256 is unique: two requests carrying one authorization can never both reserve, however
//! many arrive at once — in one process (SQLite) or on any number of replicas sharing one
//! PostgreSQL database. The nonce itself and `validBefore` are kept too (public once settled,
//! useless without the signature): they are what reconciliation asks the chain about.

mod postgres;
mod sqlite;

use std::time::Duration;

pub use postgres::PostgresLedger;
pub use sqlite::SqliteLedger;

/// What the payment gate knows when it reserves.
#[derive(Debug, Clone)]
pub struct NewAttempt {
    /// The machine id.
    pub machine: String,
    /// The machine's family.
    pub family: String,
    /// The payer address.
    pub payer: String,
    /// The price in atomic units.
    pub amount_atomic: String,
    /// The payment asset.
    pub asset: String,
    /// The payment network (CAIP-2).
    pub network: String,
    /// Our payTo address.
    pub pay_to: String,
    /// sha256 of the EIP-3009 nonce (the uniqueness key).
    pub nonce_sha256: String,
    /// The EIP-3009 nonce, 0x-prefixed hex.
    pub nonce: String,
    /// The authorization's `validBefore` (unix seconds, decimal).
    pub valid_before: String,
    /// sha256 of the canonical request.
    pub request_sha256: String,
    /// The request's `x-request-id`: support goes from a buyer's complaint to the row and
    /// the request's log lines.
    pub request_id: String,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Settled on chain.
    Settled {
        /// The settlement transaction.
        transaction: String,
    },
    /// The facilitator did not settle; the result was withheld.
    SettleFailed {
        /// Why.
        reason: String,
    },
    /// The work failed; nothing was settled.
    WorkFailed {
        /// Why.
        reason: String,
    },
}

/// What reconciliation learned from the chain about a `reserved` or `settle_failed` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The authorization was used: the buyer paid. The transaction is None when the
    /// `AuthorizationUsed` event could not be found.
    Settled {
        /// The transaction of the `AuthorizationUsed` event, when found.
        transaction: Option<String>,
    },
    /// Unused and past `validBefore`: nothing was or ever will be charged.
    Expired,
}

/// A row as stored (for reports, start-up recovery and reconciliation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    /// The row id.
    pub id: i64,
    /// The machine id.
    pub machine: String,
    /// The machine's family.
    pub family: String,
    /// The payer address.
    pub payer: String,
    /// The price in atomic units.
    pub amount_atomic: String,
    /// The payment asset.
    pub asset: String,
    /// The payment network (CAIP-2).
    pub network: String,
    /// One of `STATES`.
    pub state: String,
    /// The settlement transaction, once settled.
    pub transaction_hash: Option<String>,
    /// The EIP-3009 nonce and `validBefore`: what `authorizationState(payer, nonce)` on the
    /// asset reconciles. None on rows written before they were kept.
    pub nonce: Option<String>,
    /// The authorization's validBefore, when recorded.
    pub valid_before: Option<String>,
    /// Why the settlement or the work failed.
    pub failure_reason: Option<String>,
    /// What reconciliation saw on chain, when it changed the row.
    pub evidence: Option<String>,
    /// When the attempt was reserved (RFC 3339).
    pub created_at: String,
    /// The request's `x-request-id`; None on rows written before it was kept.
    pub request_id: Option<String>,
}

/// A ledger failure.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The nonce was already recorded.
    #[error("this payment authorization was already presented")]
    Duplicate,
    /// The storage failed.
    #[error("ledger storage failed: {0}")]
    Storage(String),
    /// The database did not answer in time or the connection is gone.
    #[error("the ledger database is unreachable: {0}")]
    Unavailable(String),
    /// The database URL names no supported backend.
    #[error("{0} is neither sqlite:PATH nor postgres://…")]
    UnknownUrl(String),
}

/// Connection settings of a networked ledger (ignored by SQLite).
#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    /// Connections per replica at most.
    pub max_size: usize,
    /// How long connecting (or waiting for a free pooled connection) may take.
    pub connect_timeout: Duration,
}

impl PoolOptions {
    /// The pool settings of a configuration (`database_pool_size`,
    /// `database_connect_timeout_ms`).
    pub fn from_config(config: &crate::config::Config) -> PoolOptions {
        PoolOptions {
            max_size: config.database_pool_size,
            connect_timeout: Duration::from_millis(config.database_connect_timeout_ms),
        }
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            max_size: 16,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// The columns every backend selects, in `AttemptRow` order.
const ROW_COLUMNS: &str = "id, machine, family, payer, amount_atomic, asset, network, state,
    transaction_hash, nonce, valid_before, failure_reason, evidence, created_at, request_id";

/// The states a row can be in.
pub const STATES: [&str; 5] = [
    "reserved",
    "settled",
    "settle_failed",
    "work_failed",
    "expired",
];

use crate::support::timestamp::now_millis as now;

/// The payment_attempts table and its state index, both backends; `id_type` is the backend's
/// auto-incrementing key type.
fn schema(id_type: &str) -> String {
    format!(
        "
CREATE TABLE IF NOT EXISTS payment_attempts (
    id               {id_type} PRIMARY KEY,
    machine          TEXT NOT NULL,
    family           TEXT NOT NULL,
    payer            TEXT NOT NULL,
    amount_atomic    TEXT NOT NULL,
    asset            TEXT NOT NULL,
    network          TEXT NOT NULL,
    pay_to           TEXT NOT NULL,
    nonce_sha256     TEXT NOT NULL UNIQUE,
    nonce            TEXT,
    valid_before     TEXT,
    request_sha256   TEXT NOT NULL,
    request_id       TEXT,
    state            TEXT NOT NULL CHECK (state IN
                     ('reserved', 'settled', 'settle_failed', 'work_failed', 'expired')),
    transaction_hash TEXT,
    failure_reason   TEXT,
    evidence         TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS payment_attempts_state ON payment_attempts (state);
"
    )
}

fn outcome_columns(outcome: &Outcome) -> (&'static str, Option<&str>, Option<&str>) {
    match outcome {
        Outcome::Settled { transaction } => ("settled", Some(transaction.as_str()), None),
        Outcome::SettleFailed { reason } => ("settle_failed", None, Some(reason.as_str())),
        Outcome::WorkFailed { reason } => ("work_failed", None, Some(reason.as_str())),
    }
}

fn resolution_columns(resolution: &Resolution) -> (&'static str, Option<&str>) {
    match resolution {
        Resolution::Settled { transaction } => ("settled", transaction.as_deref()),
        Resolution::Expired => ("expired", None),
    }
}

/// True when a URL names a PostgreSQL database.
pub fn is_postgres_url(database_url: &str) -> bool {
    database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")
}

/// A database URL safe to log: a password is replaced; an unparseable URL that is not a
/// SQLite path is withheld whole.
pub fn redacted(database_url: &str) -> String {
    if database_url.starts_with("sqlite:") {
        return database_url.to_string();
    }
    match url::Url::parse(database_url) {
        Ok(mut url) => {
            if url.password().is_some() {
                let _ = url.set_password(Some("redacted"));
            }
            url.to_string()
        }
        Err(_) => "<unparseable database URL withheld>".into(),
    }
}

/// The configured ledger backend.
pub enum Ledger {
    /// One process per `sqlite:PATH` file.
    Sqlite(SqliteLedger),
    /// Any number of replicas sharing one database.
    Postgres(PostgresLedger),
}

impl Ledger {
    /// Opens the ledger a `database_url` names. SQLite is created and migrated at once; a
    /// PostgreSQL pool is built and its schema migrated on first use, so a database that is
    /// down at start-up costs paid calls a 503, not the service.
    pub fn open(database_url: &str, options: PoolOptions) -> Result<Ledger, LedgerError> {
        if database_url.starts_with("sqlite:") {
            Ok(Ledger::Sqlite(SqliteLedger::open(database_url)?))
        } else if is_postgres_url(database_url) {
            Ok(Ledger::Postgres(PostgresLedger::open(
                database_url,
                options,
            )?))
        } else {
            Err(LedgerError::UnknownUrl(redacted(database_url)))
        }
    }

    /// Runs the schema migration now (PostgreSQL; SQLite migrated when opened).
    pub async fn migrate(&self) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(_) => Ok(()),
            Ledger::Postgres(l) => l.ready().await,
        }
    }

    /// Reserves an attempt; `Duplicate` when its nonce is already on record.
    pub async fn reserve(&self, attempt: &NewAttempt) -> Result<i64, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.reserve(attempt),
            Ledger::Postgres(l) => l.reserve(attempt).await,
        }
    }

    /// True when a nonce is already on record (any state).
    pub async fn knows_nonce(&self, nonce_sha256: &str) -> Result<bool, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.knows_nonce(nonce_sha256),
            Ledger::Postgres(l) => l.knows_nonce(nonce_sha256).await,
        }
    }

    /// Records how a reserved attempt ended.
    pub async fn finish(&self, id: i64, outcome: &Outcome) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.finish(id, outcome),
            Ledger::Postgres(l) => l.finish(id, outcome).await,
        }
    }

    /// Records what the chain says about a row still in `from` (`reserved` or
    /// `settle_failed`). False when another process changed the row first.
    pub async fn resolve(
        &self,
        id: i64,
        from: &str,
        resolution: &Resolution,
        evidence: &str,
    ) -> Result<bool, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.resolve(id, from, resolution, evidence),
            Ledger::Postgres(l) => l.resolve(id, from, resolution, evidence).await,
        }
    }

    /// How many rows are in each state (for metrics), counted in the store.
    pub async fn counts_by_state(&self) -> Result<Vec<(String, i64)>, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.counts_by_state(),
            Ledger::Postgres(l) => l.counts_by_state().await,
        }
    }

    /// Proves the store takes a write now (for readiness) without changing it.
    pub async fn check_writable(&self) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.check_writable(),
            Ledger::Postgres(l) => l.check_writable().await,
        }
    }

    /// Attempts still `reserved` (after a crash: paid work whose end is unknown).
    pub async fn reserved(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("WHERE state = 'reserved'").await
    }

    /// Rows whose settlement outcome the chain must tell: `reserved`, and `settle_failed`.
    pub async fn unresolved(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("WHERE state IN ('reserved', 'settle_failed')")
            .await
    }

    /// Every attempt, oldest first.
    pub async fn rows(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("").await
    }

    async fn select(&self, filter: &str) -> Result<Vec<AttemptRow>, LedgerError> {
        let sql = format!("SELECT {ROW_COLUMNS} FROM payment_attempts {filter} ORDER BY id");
        match self {
            Ledger::Sqlite(l) => l.select(&sql),
            Ledger::Postgres(l) => l.select(&sql).await,
        }
    }
}

/// Opens the configured ledger.
pub fn open(database_url: &str, options: PoolOptions) -> Result<Ledger, LedgerError> {
    Ledger::open(database_url, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_password_never_shows_in_a_logged_url() {
        let shown = redacted("postgres://factomat:hunter2@db.internal:5432/ledger");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("db.internal:5432/ledger"), "{shown}");
        assert_eq!(redacted("sqlite:factomat.db"), "sqlite:factomat.db");
        assert!(!redacted("postgres://u:p w@[bad").contains("p w"));
    }

    #[test]
    fn an_unknown_scheme_is_refused_without_echoing_it_whole() {
        let error = Ledger::open("mysql://root:pw@h/db", PoolOptions::default())
            .err()
            .expect("refused");
        assert!(matches!(error, LedgerError::UnknownUrl(_)));
        assert!(!error.to_string().contains(":pw@"), "{error}");
    }
}
