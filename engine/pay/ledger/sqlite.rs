//! The embedded SQLite ledger: the quick start's default, one process per file.

use std::sync::Mutex;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::{
    AttemptRow, BIND_SQL, Binding, CHANGE_SQL, COLLECTED_SQL, Change, DELIVER_HELD_SQL, DROP_SQL,
    INDEXES, LedgerError, NewAttempt, PRECHECK_SQL, Precheck, RELEASE_ID_SQL, RESERVE_SQL,
    RETAIN_SQL, RETAINED_SQL, ROW_BY_NONCE_SQL, Retained, RetainedChange, STORE_SQL, SWEEP_SQL,
    now, retained_schema, schema,
};

impl From<rusqlite::Error> for LedgerError {
    fn from(error: rusqlite::Error) -> Self {
        match error.sqlite_error_code() {
            Some(ErrorCode::ConstraintViolation) => LedgerError::Duplicate,
            _ => LedgerError::Storage(error.to_string()),
        }
    }
}

/// The SQLite ledger. Its statements are short (one indexed row), so the payment gate runs
/// them on the request's own thread. SQLite's automatic checkpoint (every 1000 WAL pages, a
/// few milliseconds) then runs inside the commit that crosses the threshold; it is what keeps
/// the WAL bounded.
pub struct SqliteLedger {
    connection: Mutex<Connection>,
}

/// Columns added after the first release, with their types; a ledger file created before
/// them gains them.
const ADDED_COLUMNS: [(&str, &str); 7] = [
    ("nonce", "TEXT"),
    ("valid_before", "TEXT"),
    ("request_id", "TEXT"),
    ("evidence", "TEXT"),
    ("transfer_log_index", "BIGINT"),
    ("strike_until", "BIGINT"),
    ("collected_again", "BIGINT NOT NULL DEFAULT 0"),
];

/// The columns copied when an older table is rebuilt (all but `id`'s type are unchanged).
const COPIED_COLUMNS: &str = "id, machine, family, payer, amount_atomic, asset, network, pay_to,
    nonce_sha256, nonce, valid_before, request_sha256, request_id, state, transaction_hash,
    transfer_log_index, strike_until, failure_reason, evidence, collected_again, created_at,
    updated_at";

fn add_missing_columns(connection: &Connection) -> Result<(), rusqlite::Error> {
    let present: Vec<String> = connection
        .prepare("SELECT name FROM pragma_table_info('payment_attempts')")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for (column, kind) in ADDED_COLUMNS {
        if !present.iter().any(|name| name == column) {
            connection.execute_batch(&format!(
                "ALTER TABLE payment_attempts ADD COLUMN {column} {kind}"
            ))?;
        }
    }
    Ok(())
}

/// SQLite cannot alter a CHECK constraint: a table whose states predate `nonce_burned` (or
/// `expired`) is rebuilt with its rows.
fn allow_current_states(connection: &Connection) -> Result<(), rusqlite::Error> {
    let table_sql: String = connection.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'payment_attempts'",
        [],
        |row| row.get(0),
    )?;
    if table_sql.contains("'nonce_burned'") || !table_sql.contains("CHECK") {
        return Ok(());
    }
    let schema = schema("INTEGER");
    connection.execute_batch(&format!(
        "ALTER TABLE payment_attempts RENAME TO payment_attempts_before;
         DROP INDEX IF EXISTS payment_attempts_state;
         DROP INDEX IF EXISTS payment_attempts_transfer;
         DROP INDEX IF EXISTS payment_attempts_payer;
         DROP INDEX IF EXISTS payment_attempts_payer_strike;
         DROP INDEX IF EXISTS payment_attempts_transfer_proof;
         DROP INDEX IF EXISTS payment_attempts_struck;
         {schema}
         INSERT INTO payment_attempts ({COPIED_COLUMNS})
             SELECT {COPIED_COLUMNS} FROM payment_attempts_before;
         DROP TABLE payment_attempts_before;"
    ))
}

/// A row's `ROW_COLUMNS`, starting at column `at`.
fn attempt_row(r: &rusqlite::Row<'_>, at: usize) -> Result<AttemptRow, rusqlite::Error> {
    Ok(AttemptRow {
        id: r.get(at)?,
        machine: r.get(at + 1)?,
        family: r.get(at + 2)?,
        payer: r.get(at + 3)?,
        amount_atomic: r.get(at + 4)?,
        asset: r.get(at + 5)?,
        network: r.get(at + 6)?,
        pay_to: r.get(at + 7)?,
        state: r.get(at + 8)?,
        transaction_hash: r.get(at + 9)?,
        nonce: r.get(at + 10)?,
        valid_before: r.get(at + 11)?,
        failure_reason: r.get(at + 12)?,
        evidence: r.get(at + 13)?,
        created_at: r.get(at + 14)?,
        request_id: r.get(at + 15)?,
        transfer_log_index: r.get(at + 16)?,
        request_sha256: r.get(at + 17)?,
        collected_again: r.get(at + 18)?,
        updated_at: r.get(at + 19)?,
    })
}

impl SqliteLedger {
    /// Opens (creating if needed) the ledger named by a `sqlite:PATH` URL.
    pub fn open(database_url: &str) -> Result<SqliteLedger, LedgerError> {
        let path = super::sqlite_path(database_url)
            .ok_or_else(|| LedgerError::Storage(format!("{database_url:?} is not sqlite:PATH")))?;
        let mut connection = Connection::open(&path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        // FULL: a commit is on disk before the reserve or the record returns, so a power loss
        // never rolls back a row whose transfer happened (NORMAL may, in WAL mode).
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        // A stable plan per statement: without it, SQLite re-prepares the retained answers'
        // join each time its key changes (every paid call; a quarter of a million
        // instructions), to re-plan for a value that cannot change the plan of a lookup by key.
        connection.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        // One immediate transaction: two processes opening an old file at once must not both
        // try to migrate it.
        let migration =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        migration.execute_batch(&schema("INTEGER"))?;
        add_missing_columns(&migration)?;
        allow_current_states(&migration)?;
        migration.execute_batch(INDEXES)?;
        migration.execute_batch(&retained_schema("BLOB"))?;
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

    pub(super) fn select(&self, sql: &str) -> Result<Vec<AttemptRow>, LedgerError> {
        self.with(|c| {
            let mut statement = c.prepare_cached(sql)?;
            let rows = statement.query_map([], |r| attempt_row(r, 0))?;
            rows.collect()
        })
    }

    pub(super) fn row_by_nonce(
        &self,
        nonce_sha256: &str,
    ) -> Result<Option<AttemptRow>, LedgerError> {
        self.with(|c| {
            c.prepare_cached(ROW_BY_NONCE_SQL)?
                .query_row(params![nonce_sha256], |r| attempt_row(r, 0))
                .optional()
        })
    }

    pub(super) fn reserve(
        &self,
        a: &NewAttempt,
        binding: Option<&Binding>,
    ) -> Result<i64, LedgerError> {
        let at = now();
        // Cached statements (here and below): every paid call runs these, and parsing their
        // SQL each time showed up in the paid path's profile.
        let connection = self
            .connection
            .lock()
            .map_err(|_| LedgerError::Storage("ledger lock poisoned".into()))?;
        let transaction = connection.unchecked_transaction()?;
        transaction.prepare_cached(RESERVE_SQL)?.execute(params![
            a.machine,
            a.family,
            a.payer,
            a.amount_atomic,
            a.asset,
            a.network,
            a.pay_to,
            a.nonce_sha256,
            a.nonce,
            a.valid_before,
            a.request_sha256,
            a.request_id,
            at
        ])?;
        let id = transaction.last_insert_rowid();
        if let Some(binding) = binding {
            transaction
                .prepare_cached(BIND_SQL)?
                .execute(params![binding.lookup_sha256, id, binding.id_sha256, at])
                .map_err(|error| match LedgerError::from(error) {
                    LedgerError::Duplicate => LedgerError::IdentifierBound,
                    other => other,
                })?;
        }
        transaction.commit()?;
        Ok(id)
    }

    pub(super) fn retained(
        &self,
        lookup_sha256: &str,
        id_sha256: Option<&str>,
    ) -> Result<Vec<Retained>, LedgerError> {
        self.with(|c| {
            c.prepare_cached(RETAINED_SQL)?
                .query_map(params![lookup_sha256, id_sha256], |r| {
                    Ok(Retained {
                        lookup_sha256: r.get(0)?,
                        id_sha256: r.get(1)?,
                        kind: r.get(2)?,
                        sealed: r.get(3)?,
                        collectable_until: r.get(4)?,
                        attempt: attempt_row(r, 5)?,
                    })
                })?
                .collect()
        })
    }

    pub(super) fn retain(
        &self,
        id: i64,
        binding: &Binding,
        sealed: &[u8],
        collectable_until: i64,
    ) -> Result<(), LedgerError> {
        self.with(|c| {
            c.prepare_cached(RETAIN_SQL)?.execute(params![
                binding.lookup_sha256,
                id,
                binding.id_sha256,
                sealed,
                collectable_until,
                now()
            ])
        })
        .map(|_| ())
    }

    pub(super) fn deliver_held(
        &self,
        id: i64,
        sealed: &[u8],
        collectable_until: i64,
    ) -> Result<bool, LedgerError> {
        self.with(|c| {
            c.prepare_cached(DELIVER_HELD_SQL)?
                .execute(params![sealed, collectable_until, id])
        })
        .map(|stored| stored == 1)
    }

    pub(super) fn forget(&self, id: i64) -> Result<(), LedgerError> {
        self.with(|c| c.prepare_cached(DROP_SQL)?.execute(params![id]))
            .map(|_| ())
    }

    pub(super) fn note_collected(&self, id: i64) -> Result<(), LedgerError> {
        self.with(|c| c.prepare_cached(COLLECTED_SQL)?.execute(params![id]))
            .map(|_| ())
    }

    /// `horizon`: settled before it, a binding without an answer or a held result goes.
    pub(super) fn sweep_retained(&self, now: i64, horizon: &str) -> Result<u64, LedgerError> {
        self.with(|c| c.prepare_cached(SWEEP_SQL)?.execute(params![now, horizon]))
            .map(|swept| swept as u64)
    }

    pub(super) fn precheck(
        &self,
        nonce_sha256: &str,
        payer_lower: &str,
        now: i64,
    ) -> Result<Precheck, LedgerError> {
        self.with(|c| {
            c.prepare_cached(PRECHECK_SQL)?.query_row(
                params![nonce_sha256, payer_lower, now],
                |r| {
                    Ok(Precheck {
                        nonce_known: r.get(0)?,
                        payer_struck: r.get(1)?,
                    })
                },
            )
        })
    }

    pub(super) fn change(
        &self,
        id: i64,
        from: &str,
        c: &Change<'_>,
        retained: &RetainedChange<'_>,
    ) -> Result<bool, LedgerError> {
        let connection = self
            .connection
            .lock()
            .map_err(|_| LedgerError::Storage("ledger lock poisoned".into()))?;
        let transaction = connection.unchecked_transaction()?;
        let changed = transaction.prepare_cached(CHANGE_SQL)?.execute(params![
            c.state,
            c.transaction,
            c.transfer_log_index,
            c.failure_reason,
            c.evidence,
            c.strike_until,
            now(),
            id,
            from
        ])?;
        if changed == 1 {
            match retained {
                RetainedChange::None => {}
                RetainedChange::Store {
                    sealed,
                    kind,
                    collectable_until,
                    release_id,
                } => {
                    transaction.prepare_cached(STORE_SQL)?.execute(params![
                        sealed,
                        kind,
                        collectable_until,
                        id,
                        release_id
                    ])?;
                }
                RetainedChange::Drop => {
                    transaction.prepare_cached(DROP_SQL)?.execute(params![id])?;
                }
                RetainedChange::ReleaseId => {
                    transaction
                        .prepare_cached(RELEASE_ID_SQL)?
                        .execute(params![id])?;
                }
            }
        }
        transaction.commit()?;
        Ok(changed == 1)
    }

    pub(super) fn counts_by_state(&self) -> Result<Vec<(String, i64)>, LedgerError> {
        self.with(|c| {
            c.prepare_cached("SELECT state, COUNT(*) FROM payment_attempts GROUP BY state")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
    }

    /// Takes the write lock and releases it: a read-only file, a full disk's locked journal
    /// or another writer holding the lock past the busy timeout fails here.
    pub(super) fn check_writable(&self) -> Result<(), LedgerError> {
        self.with(|c| c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Keep, Outcome, ROW_COLUMNS, UNDECIDED, UNUSED_PAST_VALID_BEFORE};
    use super::*;

    /// An empty folder of this process's for one test's ledger: anything an earlier process
    /// with the same id left there (a ledger, its write-ahead log) is removed first.
    fn fresh_dir(label: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("factomat-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    fn resolve(ledger: &SqliteLedger, id: i64, from: &str, outcome: &Outcome) -> bool {
        ledger
            .change(id, from, &outcome.change(), &RetainedChange::None)
            .expect("change")
    }

    fn expired(evidence: &str) -> Outcome {
        Outcome::Expired {
            evidence: evidence.into(),
        }
    }

    fn stored(ledger: &SqliteLedger, filter: &str) -> Vec<AttemptRow> {
        ledger
            .select(&format!(
                "SELECT {ROW_COLUMNS} FROM payment_attempts {filter} ORDER BY id"
            ))
            .expect("rows")
    }

    /// The second released schema: states without `expired`, no evidence column.
    const SECOND_SCHEMA: &str = "
    CREATE TABLE payment_attempts (
        id INTEGER PRIMARY KEY, machine TEXT NOT NULL, family TEXT NOT NULL,
        payer TEXT NOT NULL, amount_atomic TEXT NOT NULL, asset TEXT NOT NULL,
        network TEXT NOT NULL, pay_to TEXT NOT NULL, nonce_sha256 TEXT NOT NULL UNIQUE,
        nonce TEXT, valid_before TEXT, request_sha256 TEXT NOT NULL,
        state TEXT NOT NULL
            CHECK (state IN ('reserved', 'settled', 'settle_failed', 'work_failed')),
        transaction_hash TEXT, failure_reason TEXT,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
    CREATE INDEX payment_attempts_state ON payment_attempts (state);
    INSERT INTO payment_attempts VALUES (7, 'VM02', 'ONCHAIN_PREFLIGHT', '0xabc', '10000',
        '0xasset', 'eip155:8453', '0xpayee', 'aa', '0x01', '5', 'bb', 'reserved', NULL, NULL,
        't', 't');
    ";

    #[test]
    fn a_ledger_whose_states_predate_expired_is_rebuilt_with_its_rows() {
        let dir = fresh_dir("ledger2");
        let path = dir.join("second.db");
        Connection::open(&path)
            .and_then(|c| c.execute_batch(SECOND_SCHEMA))
            .expect("old ledger");
        let url = format!("sqlite:{}", path.display());
        let ledger = SqliteLedger::open(&url).expect("open");
        let before = stored(&ledger, "");
        assert_eq!(before.len(), 1);
        assert_eq!((before[0].id, before[0].state.as_str()), (7, "reserved"));
        assert!(
            resolve(&ledger, 7, "reserved", &expired("unused, past validBefore")),
            "the rebuilt table accepts the expired state"
        );
        assert!(
            !resolve(&ledger, 7, "reserved", &expired("again")),
            "a row resolved once is not resolved again"
        );
        let after = stored(&ledger, "");
        assert_eq!(after[0].state, "expired");
        assert_eq!(
            after[0].evidence.as_deref(),
            Some("unused, past validBefore")
        );
        ledger
            .reserve(&attempt(1), None)
            .expect("reserve after rebuild");
        assert!(matches!(
            ledger.reserve(&attempt(1), None),
            Err(LedgerError::Duplicate)
        ));
        drop(ledger);
        SqliteLedger::open(&url).expect("reopening is a no-op");
        let _ = std::fs::remove_dir_all(&dir);
    }

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
            request_id: format!("req-{n}"),
        }
    }

    #[test]
    fn a_strike_outlives_the_rows_later_changes_unless_it_turns_out_paid() {
        let dir = fresh_dir("strikes");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let struck = |ledger: &SqliteLedger| {
            ledger
                .precheck("none", "0xabc", 1_000)
                .expect("precheck")
                .payer_struck
        };
        let failed = Outcome::SettleFailed {
            reason: "invalid_exact_evm_insufficient_balance".into(),
            evidence: None,
            strike_until: Some(2_000),
        };
        for n in [1, 2] {
            let id = ledger.reserve(&attempt(n), None).expect("reserve");
            assert!(resolve(&ledger, id, "reserved", &failed));
        }
        assert!(struck(&ledger));
        assert!(resolve(
            &ledger,
            1,
            "settle_failed",
            &expired("past validBefore")
        ));
        assert!(resolve(
            &ledger,
            2,
            "settle_failed",
            &expired("past validBefore")
        ));
        assert!(struck(&ledger), "reconcile's expiry keeps the strike");
        let paid = Outcome::Settled {
            transaction: format!("0x{}", "ab".repeat(32)),
            transfer_log_index: Some(1),
            evidence: None,
        };
        let id = ledger.reserve(&attempt(3), None).expect("reserve");
        assert!(resolve(&ledger, id, "reserved", &failed));
        assert!(resolve(&ledger, id, "settle_failed", &paid));
        let strikes: Vec<Option<i64>> = ledger
            .with(|c| {
                c.prepare("SELECT strike_until FROM payment_attempts ORDER BY id")?
                    .query_map([], |r| r.get(0))?
                    .collect()
            })
            .expect("strikes");
        assert_eq!(strikes, [Some(2_000), Some(2_000), None], "paid lifts it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_paid_paths_lookups_are_not_prepared_again_for_each_key() {
        let dir = fresh_dir("prepared");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        for n in 0..5 {
            let key = format!("{n:064x}");
            ledger.reserve(&attempt(n), None).expect("reserve");
            ledger.retained(&key, None).expect("retained");
            assert!(ledger.row_by_nonce(&key).expect("row").is_some());
            ledger.precheck(&key, "0xabc", 0).expect("precheck");
        }
        assert_eq!(ledger.row_by_nonce("not a nonce").expect("row"), None);
        for sql in [RETAINED_SQL, ROW_BY_NONCE_SQL, PRECHECK_SQL] {
            let reprepared = ledger
                .with(|c| {
                    Ok(c.prepare_cached(sql)?
                        .get_status(rusqlite::StatementStatus::RePrepare))
                })
                .expect("status");
            assert_eq!(reprepared, 0, "{sql}");
        }
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The previous release's full indexes, in place of the partial ones.
    const FULL_INDEXES: &str = "
    DROP INDEX payment_attempts_transfer_proof;
    DROP INDEX payment_attempts_struck;
    CREATE UNIQUE INDEX payment_attempts_transfer
        ON payment_attempts (transaction_hash, transfer_log_index);
    CREATE INDEX payment_attempts_payer_strike ON payment_attempts (lower(payer), strike_until);
    ";

    /// Pages a reservation and its settled record write to the log, on a fresh ledger
    /// (with the previous release's full indexes when `full`).
    fn paid_call_wal_frames(label: &str, full: bool) -> i64 {
        let dir = fresh_dir(label);
        let ledger = SqliteLedger::open(&format!("sqlite:{}", dir.join("ledger.db").display()))
            .expect("open");
        if full {
            ledger
                .with(|c| c.execute_batch(FULL_INDEXES))
                .expect("full indexes");
        }
        let frames = |mode: &str| {
            ledger
                .with(|c| c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1)))
                .expect("checkpoint")
        };
        frames("TRUNCATE");
        let id = ledger.reserve(&attempt(1), None).expect("reserve");
        let settled = Outcome::Settled {
            transaction: "0xfeed".into(),
            transfer_log_index: None,
            evidence: None,
        };
        assert!(resolve(&ledger, id, "reserved", &settled));
        let written = frames("PASSIVE");
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
        written
    }

    #[test]
    fn a_paid_call_writes_no_strike_entry_and_no_proof_entry_before_its_transaction() {
        let partial = paid_call_wal_frames("partial", false);
        let full = paid_call_wal_frames("full", true);
        // The reservation writes neither index's page; the record writes the proof's entry
        // either way, and a strike that stays null changes neither.
        assert_eq!(full - partial, 2, "partial {partial}, full {full}");
    }

    #[test]
    fn the_previous_full_indexes_become_partial_and_the_precheck_reads_the_strikes_one() {
        let dir = fresh_dir("partial-indexes");
        let url = format!("sqlite:{}", dir.join("ledger.db").display());
        let ledger = SqliteLedger::open(&url).expect("open");
        ledger
            .with(|c| c.execute_batch(FULL_INDEXES))
            .expect("previous release");
        drop(ledger);
        let ledger = SqliteLedger::open(&url).expect("reopen migrates");
        let indexes: Vec<(String, String)> = ledger
            .with(|c| {
                let mut statement = c.prepare(
                    "SELECT name, sql FROM sqlite_master
                     WHERE type = 'index' AND tbl_name = 'payment_attempts' AND sql IS NOT NULL
                     ORDER BY name",
                )?;
                statement
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .expect("indexes");
        let names: Vec<&str> = indexes.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "payment_attempts_state",
                "payment_attempts_struck",
                "payment_attempts_transfer_proof"
            ]
        );
        assert!(indexes[1].1.contains("WHERE strike_until IS NOT NULL"));
        assert!(indexes[2].1.contains("WHERE transaction_hash IS NOT NULL"));
        let plan: Vec<String> = ledger
            .with(|c| {
                let mut statement = c.prepare(&format!("EXPLAIN QUERY PLAN {PRECHECK_SQL}"))?;
                statement
                    .query_map(params!["aa", "0xabc", 0], |r| r.get(3))?
                    .collect()
            })
            .expect("plan");
        assert!(
            plan.iter()
                .any(|step| step.contains("INDEX payment_attempts_struck (")),
            "{plan:?}"
        );
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_commit_waits_for_the_disk() {
        let dir = fresh_dir("sync");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let level: i64 = ledger
            .with(|c| c.pragma_query_value(None, "synchronous", |r| r.get(0)))
            .expect("pragma");
        // 2 = FULL: a power loss cannot roll back a reserved or settled row.
        assert_eq!(level, 2);
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_transfer_proves_one_row_and_a_strike_ends_on_time() {
        let dir = fresh_dir("proof");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let first = ledger.reserve(&attempt(1), None).expect("reserve");
        let second = ledger.reserve(&attempt(2), None).expect("reserve");
        let proven = Outcome::Settled {
            transaction: "0xfeed".into(),
            transfer_log_index: Some(3),
            evidence: None,
        };
        assert!(resolve(&ledger, first, "reserved", &proven));
        assert!(matches!(
            ledger.change(second, "reserved", &proven.change(), &RetainedChange::None),
            Err(LedgerError::Duplicate)
        ));
        let burned = Outcome::NonceBurned {
            transaction: "0xfeed".into(),
            evidence: "spent elsewhere".into(),
            strike_until: Some(2_000),
        };
        assert!(resolve(&ledger, second, "reserved", &burned));
        let check = |payer: &str, now| {
            ledger
                .precheck(&format!("{:064x}", 9), payer, now)
                .expect("precheck")
        };
        assert!(check("0xabc", 1_999).payer_struck);
        assert!(!check("0xabc", 2_000).payer_struck, "the strike ends");
        assert!(!check("0xdef", 1_000).payer_struck);
        assert!(
            ledger
                .precheck(&format!("{:064x}", 1), "0xdef", 0)
                .expect("precheck")
                .nonce_known
        );
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_settled_rows_unanswered_binding_outlives_the_sweep_until_the_held_window_ends() {
        let dir = fresh_dir("sweep");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let paid = ledger
            .reserve(&attempt(1), Some(&bind(1)))
            .expect("reserve");
        let unpaid = ledger
            .reserve(&attempt(2), Some(&bind(2)))
            .expect("reserve");
        let settled = Outcome::Settled {
            transaction: "0xfeed".into(),
            transfer_log_index: Some(1),
            evidence: None,
        };
        assert!(resolve(&ledger, paid, "reserved", &settled));
        let failed = Outcome::WorkFailed {
            reason: "upstream".into(),
        };
        assert!(resolve(&ledger, unpaid, "reserved", &failed));
        let bindings = || {
            ledger
                .with(|c| {
                    c.query_row("SELECT count(*) FROM retained_answers", [], |r| {
                        r.get::<_, i64>(0)
                    })
                })
                .expect("count")
        };
        // A result held while its settlement was pending, the row then settled by a reconcile.
        held_then_settled(&ledger, 3);
        let now = crate::pay::call::unix_now();
        let horizon = |ago: i64| super::super::settled_before(now.saturating_add_signed(-ago));
        let sweep = |horizon: String| {
            ledger
                .sweep_retained(i64::try_from(now).expect("now"), &horizon)
                .expect("sweep")
        };
        // Within the held window: only the unpaid row's binding goes.
        assert_eq!(sweep(horizon(86_400)), 1);
        assert_eq!(bindings(), 2, "the paid rows' binding and held result stay");
        // Once it has passed, the paid row's binding and the held result go too.
        assert_eq!(sweep(horizon(-1)), 2);
        assert_eq!(bindings(), 0);
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A refusal before broadcasting may still be executed until `validBefore`: its row stays
    /// among the undecided and its held result outlives the sweep within the held results'
    /// window, until the chain decides it; its payment-identifier `id` is let go at once, for
    /// the buyer's new payment. A row read unused past `validBefore` is final: neither.
    #[test]
    fn a_refusal_before_broadcasting_keeps_its_held_result_until_the_chain_decides() {
        let dir = fresh_dir("refused");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let held = Keep::Store {
            sealed: b"sealed",
            held: true,
            collectable_until: None,
        };
        let with_id = |n: usize| Binding {
            id_sha256: Some(format!("id-{n}")),
            ..bind(n)
        };
        let fail_keeping = |n: usize, reason: &str, keep: Keep<'static>| {
            let id = ledger
                .reserve(&attempt(n), Some(&with_id(n)))
                .expect("reserve");
            let failed = Outcome::SettleFailed {
                reason: reason.into(),
                evidence: None,
                strike_until: None,
            };
            let change = failed.change();
            let keep = RetainedChange::of(&change, keep);
            assert!(
                ledger
                    .change(id, "reserved", &change, &keep)
                    .expect("change")
            );
            id
        };
        let fail = |n: usize, reason: &str| fail_keeping(n, reason, held);
        let refused = fail(1, "invalid_exact_evm_signature");
        let swept_later = fail(2, "insufficient_funds");
        fail(3, UNUSED_PAST_VALID_BEFORE);
        // A result that could not be sealed: its binding lets go of the `id` all the same.
        let unsealed = fail_keeping(4, "invalid_exact_evm_signature", Keep::Untouched);
        let kept = || {
            ledger
                .with(|c| {
                    c.prepare("SELECT attempt_id, kind, id_sha256 FROM retained_answers ORDER BY attempt_id")?
                        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                        .collect::<Result<Vec<(i64, String, Option<String>)>, _>>()
                })
                .expect("retained")
        };
        let held_row = |id| (id, "held".to_string(), None);
        let unsealed_row = (unsealed, "in_flight".to_string(), None);
        assert_eq!(
            kept(),
            [held_row(refused), held_row(swept_later), unsealed_row]
        );
        let retry = NewAttempt {
            nonce_sha256: "retry".into(),
            ..attempt(1)
        };
        let again = Binding {
            lookup_sha256: format!("{:064x}", 99),
            ..with_id(1)
        };
        ledger
            .reserve(&retry, Some(&again))
            .expect("the same id, a new payment: no conflict");
        let undecided: Vec<i64> = stored(&ledger, UNDECIDED).iter().map(|r| r.id).collect();
        assert!(
            undecided.starts_with(&[refused, swept_later, unsealed]),
            "{undecided:?}"
        );
        assert_eq!(undecided.len(), 4, "and the retry, reserved");
        let now = crate::pay::call::unix_now();
        let sweep = |ago: i64| {
            let horizon = super::super::settled_before(now.saturating_add_signed(-ago));
            let now = i64::try_from(now).expect("now");
            ledger.sweep_retained(now, &horizon).expect("sweep")
        };
        assert_eq!(sweep(86_400), 0, "within the held results' window");
        let expired = expired("unused past validBefore");
        let change = expired.change();
        let keep = RetainedChange::of(&change, Keep::Untouched);
        assert!(
            ledger
                .change(refused, "settle_failed", &change, &keep)
                .expect("change")
        );
        assert_eq!(kept().len(), 3, "decided unpaid: deleted");
        assert_eq!(sweep(-1), 2, "past the window, undecided or not");
        assert_eq!(kept().len(), 1, "the retry's binding");
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn bind(n: usize) -> Binding {
        Binding {
            lookup_sha256: format!("{n:064x}"),
            id_sha256: None,
        }
    }

    /// A row whose result was held while its settlement was pending, then recorded `settled`
    /// by a reconcile (the result still held); its id.
    fn held_then_settled(ledger: &SqliteLedger, n: usize) -> i64 {
        let held = ledger
            .reserve(&attempt(n), Some(&bind(n)))
            .expect("reserve");
        let pending = Outcome::SettlePending {
            transaction: None,
            evidence: "not yet".into(),
        };
        let keep = RetainedChange::of(
            &pending.change(),
            Keep::Store {
                sealed: b"sealed",
                held: true,
                collectable_until: None,
            },
        );
        assert!(
            ledger
                .change(held, "reserved", &pending.change(), &keep)
                .expect("change")
        );
        let settled_later = Outcome::Settled {
            transaction: "0xbeef".into(),
            transfer_log_index: Some(1),
            evidence: None,
        };
        assert!(resolve(ledger, held, "settle_pending", &settled_later));
        held
    }

    #[test]
    fn a_reconciled_rows_held_answer_is_delivered_by_one_resend_only() {
        let dir = fresh_dir("deliver-held");
        let url = format!("sqlite:{}", dir.join("ledger.db").display());
        let ledger = SqliteLedger::open(&url).expect("open");
        let held = held_then_settled(&ledger, 1);
        assert!(ledger.deliver_held(held, b"answer", 100).expect("deliver"));
        // A concurrent resend that read the row before: the answer is already the sent one.
        assert!(!ledger.deliver_held(held, b"again", 200).expect("deliver"));
        let (sealed, kind, until): (Vec<u8>, String, i64) = ledger
            .with(|c| {
                c.query_row(
                    "SELECT sealed, kind, collectable_until FROM retained_answers WHERE attempt_id = ?1",
                    [held],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
            })
            .expect("retained");
        assert_eq!(
            (sealed.as_slice(), kind.as_str(), until),
            (&b"answer"[..], "sent", 100)
        );
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_wal_stays_bounded_under_many_commits() {
        let dir = fresh_dir("wal");
        let path = dir.join("ledger.db");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        for n in 0..3000 {
            ledger.reserve(&attempt(n), None).expect("reserve");
            let settled = Outcome::Settled {
                transaction: format!("0x{n:064x}"),
                transfer_log_index: Some(1),
                evidence: None,
            };
            assert!(resolve(
                &ledger,
                i64::try_from(n + 1).expect("id"),
                "reserved",
                &settled
            ));
        }
        let wal = std::fs::metadata(dir.join("ledger.db-wal")).map_or(0, |m| m.len());
        // 6000 commits of a few pages each would make a WAL of tens of MB without checkpoints;
        // SQLite restarts it after each 1000-page checkpoint.
        assert!(wal < 8 * 1024 * 1024, "the WAL grew to {wal} bytes");
        assert_eq!(stored(&ledger, "").len(), 3000);
        drop(ledger);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_ledger_from_before_the_nonce_column_gains_it_and_keeps_its_rows() {
        let dir = fresh_dir("ledger");
        let path = dir.join("old.db");
        Connection::open(&path)
            .and_then(|c| c.execute_batch(FIRST_SCHEMA))
            .expect("old ledger");
        let ledger = SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("open");
        let rows = stored(&ledger, "WHERE state = 'reserved'");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].nonce, None);
        let attempt = NewAttempt {
            nonce_sha256: "cc".into(),
            nonce: "0x01".into(),
            request_sha256: "dd".into(),
            request_id: "req-migrated".into(),
            ..attempt(0)
        };
        ledger
            .reserve(&attempt, None)
            .expect("reserve on the migrated table");
        let rows = stored(&ledger, "");
        assert_eq!(rows[1].nonce.as_deref(), Some("0x01"));
        assert_eq!(rows[1].valid_before.as_deref(), Some("99"));
        assert_eq!(rows[0].request_id, None);
        assert_eq!(rows[1].request_id.as_deref(), Some("req-migrated"));
        drop(ledger);
        SqliteLedger::open(&format!("sqlite:{}", path.display())).expect("reopening is a no-op");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
