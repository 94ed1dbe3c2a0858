//! The settlement ledger: one row per paid attempt, so nothing paid is lost and nothing is
//! charged twice.
//!
//! A row holds what accounting needs and nothing a buyer would not want kept: never a
//! response body, a purchased page, the raw payment payload or its signature. The nonce's
//! sha256 is unique: two requests carrying one authorization can never both reserve, however
//! many arrive at once. The nonce itself and `validBefore` are kept too (public once settled,
//! useless without the signature): they are what reconciliation asks the chain about.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

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

/// A row as stored (for reports and start-up recovery).
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
    /// reserved, settled, settle_failed or work_failed.
    pub state: String,
    /// The settlement transaction, once settled.
    pub transaction_hash: Option<String>,
    /// The EIP-3009 nonce and `validBefore`: what `authorizationState(payer, nonce)` on the
    /// asset reconciles. None on rows written before they were kept.
    pub nonce: Option<String>,
    /// The authorization's validBefore, when recorded.
    pub valid_before: Option<String>,
    /// When the attempt was reserved (RFC 3339).
    pub created_at: String,
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
}

impl From<rusqlite::Error> for LedgerError {
    fn from(error: rusqlite::Error) -> Self {
        match error.sqlite_error_code() {
            Some(ErrorCode::ConstraintViolation) => LedgerError::Duplicate,
            _ => LedgerError::Storage(error.to_string()),
        }
    }
}

/// A ledger backend. SQLite is the default; a PostgreSQL backend can implement this too.
pub trait Ledger: Send + Sync {
    /// Reserves an attempt; `Duplicate` when its nonce is already reserved or settled.
    fn reserve(&self, attempt: &NewAttempt) -> Result<i64, LedgerError>;
    /// True when a nonce is already on record (any state).
    fn knows_nonce(&self, nonce_sha256: &str) -> Result<bool, LedgerError>;
    /// Records how a reserved attempt ended.
    fn finish(&self, id: i64, outcome: &Outcome) -> Result<(), LedgerError>;
    /// Attempts still `reserved` (after a crash: paid work whose end is unknown).
    fn reserved(&self) -> Result<Vec<AttemptRow>, LedgerError>;
    /// Every attempt, oldest first.
    fn rows(&self) -> Result<Vec<AttemptRow>, LedgerError>;
}

/// The SQLite ledger. Its statements are short (one indexed row), so the payment gate runs
/// them on the request's own thread. SQLite's automatic checkpoint (every 1000 WAL pages, a
/// few milliseconds) then runs inside the commit that crosses the threshold; it is what keeps
/// the WAL bounded.
pub struct SqliteLedger {
    connection: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS payment_attempts (
    id               INTEGER PRIMARY KEY,
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
    state            TEXT NOT NULL
                     CHECK (state IN ('reserved', 'settled', 'settle_failed', 'work_failed')),
    transaction_hash TEXT,
    failure_reason   TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS payment_attempts_state ON payment_attempts (state);
";

/// Columns added after the first release; a ledger file created before them gains them.
const ADDED_COLUMNS: [&str; 2] = ["nonce", "valid_before"];

use crate::support::timestamp::now_millis as now;

fn add_missing_columns(connection: &Connection) -> Result<(), rusqlite::Error> {
    let present: Vec<String> = connection
        .prepare("SELECT name FROM pragma_table_info('payment_attempts')")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for column in ADDED_COLUMNS {
        if !present.iter().any(|name| name == column) {
            connection.execute_batch(&format!(
                "ALTER TABLE payment_attempts ADD COLUMN {column} TEXT"
            ))?;
        }
    }
    Ok(())
}

impl SqliteLedger {
    /// Opens (creating if needed) the ledger named by a `sqlite:PATH` URL.
    pub fn open(database_url: &str) -> Result<SqliteLedger, LedgerError> {
        let path = database_url
            .strip_prefix("sqlite:")
            .ok_or_else(|| LedgerError::Storage(format!("{database_url:?} is not sqlite:PATH")))?;
        let path = PathBuf::from(path.strip_prefix("//").unwrap_or(path));
        let mut connection = Connection::open(&path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        // One immediate transaction: two processes opening an old file at once must not both
        // try to add a column.
        let migration =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        migration.execute_batch(SCHEMA)?;
        add_missing_columns(&migration)?;
        migration.commit()?;
        Ok(SqliteLedger {
            connection: Mutex::new(connection),
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, LedgerError> {
        let connection = self
            .connection
            .lock()
            .map_err(|_| LedgerError::Storage("ledger lock poisoned".into()))?;
        f(&connection).map_err(LedgerError::from)
    }

    fn select(&self, filter: &str) -> Result<Vec<AttemptRow>, LedgerError> {
        let sql = format!(
            "SELECT id, machine, family, payer, amount_atomic, state, transaction_hash, nonce,
                    valid_before, created_at
             FROM payment_attempts {filter} ORDER BY id"
        );
        self.with(|c| {
            let mut statement = c.prepare(&sql)?;
            let rows = statement.query_map([], |r| {
                Ok(AttemptRow {
                    id: r.get(0)?,
                    machine: r.get(1)?,
                    family: r.get(2)?,
                    payer: r.get(3)?,
                    amount_atomic: r.get(4)?,
                    state: r.get(5)?,
                    transaction_hash: r.get(6)?,
                    nonce: r.get(7)?,
                    valid_before: r.get(8)?,
                    created_at: r.get(9)?,
                })
            })?;
            rows.collect()
        })
    }
}

impl Ledger for SqliteLedger {
    fn reserve(&self, a: &NewAttempt) -> Result<i64, LedgerError> {
        let at = now();
        // Cached statements (here and below): every paid call runs these three, and parsing
        // their SQL each time showed up in the paid path's profile.
        self.with(|c| {
            c.prepare_cached(
                "INSERT INTO payment_attempts (machine, family, payer, amount_atomic, asset, network,
                     pay_to, nonce_sha256, nonce, valid_before, request_sha256, state, created_at,
                     updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'reserved', ?12, ?12)",
            )?
            .execute(params![
                a.machine, a.family, a.payer, a.amount_atomic, a.asset, a.network, a.pay_to,
                a.nonce_sha256, a.nonce, a.valid_before, a.request_sha256, at
            ])?;
            Ok(c.last_insert_rowid())
        })
    }

    fn knows_nonce(&self, nonce_sha256: &str) -> Result<bool, LedgerError> {
        self.with(|c| {
            c.prepare_cached("SELECT 1 FROM payment_attempts WHERE nonce_sha256 = ?1")?
                .query_row([nonce_sha256], |_| Ok(()))
                .optional()
                .map(|found| found.is_some())
        })
    }

    fn finish(&self, id: i64, outcome: &Outcome) -> Result<(), LedgerError> {
        let (state, transaction, reason) = match outcome {
            Outcome::Settled { transaction } => ("settled", Some(transaction.as_str()), None),
            Outcome::SettleFailed { reason } => ("settle_failed", None, Some(reason.as_str())),
            Outcome::WorkFailed { reason } => ("work_failed", None, Some(reason.as_str())),
        };
        let changed = self.with(|c| {
            c.prepare_cached(
                "UPDATE payment_attempts
                 SET state = ?1, transaction_hash = ?2, failure_reason = ?3, updated_at = ?4
                 WHERE id = ?5 AND state = 'reserved'",
            )?
            .execute(params![state, transaction, reason, now(), id])
        })?;
        if changed == 1 {
            Ok(())
        } else {
            Err(LedgerError::Storage(format!(
                "attempt {id} is not reserved"
            )))
        }
    }

    fn reserved(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("WHERE state = 'reserved'")
    }

    fn rows(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("")
    }
}

/// Opens the configured ledger.
pub fn open(database_url: &str) -> Result<Arc<dyn Ledger>, LedgerError> {
    Ok(Arc::new(SqliteLedger::open(database_url)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first released schema: no nonce, no valid_before.
    const FIRST_SCHEMA: &str = "
    CREATE TABLE payment_attempts (
        id INTEGER PRIMARY KEY, machine TEXT NOT NULL, family TEXT NOT NULL,
        payer TEXT NOT NULL, amount_atomic TEXT NOT NULL, asset TEXT NOT NULL,
        network TEXT NOT NULL, pay_to TEXT NOT NULL, nonce_sha256 TEXT NOT NULL UNIQUE,
        request_sha256 TEXT NOT NULL, state TEXT NOT NULL, transaction_hash TEXT,
        failure_reason TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
    INSERT INTO payment_attempts VALUES (1, 'VM02', 'ONCHAIN_PREFLIGHT', '0xabc', '10000',
        '0xasset', 'eip155:8453', '0xpayee', 'aa', 'bb', 'reserved', NULL, NULL, 't', 't');
    ";

    fn attempt(n: usize) -> NewAttempt {
        NewAttempt {
            machine: "VM02".into(),
            family: "ONCHAIN_PREFLIGHT".into(),
            payer: "0xabc".into(),
            amount_atomic: "10000".into(),
            asset: "0xasset".into(),
            network: "eip155:8453".into(),
            pay_to: "0xpayee".into(),
            nonce_sha256: format!("{n:064x}"),
            nonce: format!("0x{n:064x}"),
            valid_before: "99".into(),
            request_sha256: "dd".repeat(32),
        }
    }

    #[test]
    fn the_wal_stays_bounded_under_many_commits() {
        let dir = std::env::temp_dir().join(format!("factomat-wal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        for n in 0..3000 {
            ledger.reserve(&attempt(n)).expect("reserve");
            ledger
                .finish(
                    i64::try_from(n + 1).expect("id"),
                    &Outcome::Settled {
                        transaction: format!("0x{n:064x}"),
                    },
                )
                .expect("finish");
        }
        let wal = std::fs::metadata(dir.join("ledger.db-wal")).map_or(0, |m| m.len());
        // 6000 commits of a few pages each would make a WAL of tens of MB without checkpoints;
        // SQLite restarts it after each 1000-page checkpoint.
        assert!(wal < 8 * 1024 * 1024, "the WAL grew to {wal} bytes");
        assert_eq!(ledger.rows().expect("rows").len(), 3000);
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_ledger_from_before_the_nonce_column_gains_it_and_keeps_its_rows() {
        let dir = std::env::temp_dir().join(format!("factomat-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("old.db");
        let _ = std::fs::remove_file(&path);
        Connection::open(&path)
            .and_then(|c| c.execute_batch(FIRST_SCHEMA))
            .expect("old ledger");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let rows = ledger.reserved().expect("rows");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].nonce, None);
        let attempt = NewAttempt {
            machine: "VM02".into(),
            family: "ONCHAIN_PREFLIGHT".into(),
            payer: "0xabc".into(),
            amount_atomic: "10000".into(),
            asset: "0xasset".into(),
            network: "eip155:8453".into(),
            pay_to: "0xpayee".into(),
            nonce_sha256: "cc".into(),
            nonce: "0x01".into(),
            valid_before: "99".into(),
            request_sha256: "dd".into(),
        };
        ledger
            .reserve(&attempt)
            .expect("reserve on the migrated table");
        let rows = ledger.rows().expect("rows");
        assert_eq!(rows[1].nonce.as_deref(), Some("0x01"));
        assert_eq!(rows[1].valid_before.as_deref(), Some("99"));
        drop(ledger);
        SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("reopening is a no-op");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
