//! The PostgreSQL ledger: any number of replicas share one database, and the unique index
//! on the nonce's sha256 makes one authorization reserve once across all of them.
//!
//! The schema is migrated on first use under a transaction-scoped advisory lock, so replicas
//! starting together never race on DDL, and a database that is down at start-up only delays
//! the migration to the first call that finds it up.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::OnceCell;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use super::tls;

use super::{
    AttemptRow, BINDING_INSERT, Binding, CHANGE_SQL, COLLECTED_SQL, Change, DELIVER_HELD_SQL,
    DROP_SQL, INDEXES, LedgerError, NewAttempt, PRECHECK_SQL, PoolOptions, Precheck, RESERVE_SQL,
    RETAIN_SQL, RETAINED_SQL, ROW_BY_NONCE_SQL, Retained, RetainedChange, STATE_LIST, SWEEP_SQL,
    now, redacted, retained_schema, schema,
};

/// One statement argument.
type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

/// The advisory lock key every replica takes while migrating ("factomat" in ASCII).
const MIGRATION_LOCK: i64 = 0x6661_6374_6f6d_6174;

/// Ledgers created before these columns gain them.
const ADD_COLUMNS: &str = "
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS request_id TEXT;
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS transfer_log_index BIGINT;
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS strike_until BIGINT;
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS collected_again BIGINT NOT NULL DEFAULT 0;
";

/// A ledger whose state check predates `nonce_burned` gets the current one (the table scan
/// that validates it runs once, under the migration lock).
fn current_states() -> String {
    format!(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_constraint
                          WHERE conname = 'payment_attempts_state_check'
                            AND pg_get_constraintdef(oid) LIKE '%nonce_burned%') THEN
             ALTER TABLE payment_attempts DROP CONSTRAINT IF EXISTS payment_attempts_state_check;
             ALTER TABLE payment_attempts ADD CONSTRAINT payment_attempts_state_check
                 CHECK (state IN ({STATE_LIST}));
           END IF;
         END $$;"
    )
}

/// A statement written with `?n` placeholders, numbered as PostgreSQL wants.
fn numbered(sql: &str) -> String {
    sql.replace('?', "$")
}

/// The statements as PostgreSQL runs them, made once per process rather than on every call
/// (each is also prepared once per pooled connection): the shared ones numbered, and the
/// writes that are one statement here (a reserve with its binding, a change with its
/// retained answer).
struct Numbered {
    reserve: String,
    reserve_binding: String,
    retained: String,
    retain: String,
    collected: String,
    deliver_held: String,
    forget: String,
    sweep: String,
    precheck: String,
    change: String,
    change_storing: String,
    change_dropping: String,
    change_releasing_id: String,
    row_by_nonce: String,
}

/// The shared reserve (`$1`–`$13`), answering the new row's id.
fn reserve() -> String {
    format!("{} RETURNING id", numbered(RESERVE_SQL))
}

/// The reserve with its binding (`$14` the lookup, `$15` the id's hash) as one statement,
/// so one round trip: the binding reads the new row's id, so the row (and its nonce's unique
/// index) is written first, as in two statements.
fn reserve_binding() -> String {
    format!(
        "WITH attempt AS ({}),
         bound AS ({} SELECT $14, id, $15, 'in_flight', $13 FROM attempt)
         SELECT id FROM attempt",
        reserve(),
        BINDING_INSERT
    )
}

/// A row change and what it does to the row's retained answer as one statement (one round
/// trip): the answer is touched only when the row changed, and the count of changed rows is
/// the answer. `$10`–`$13` are the stored answer's sealed bytes, kind, window and whether
/// its payment-identifier `id` goes.
fn change_with(retained: &str) -> String {
    format!(
        "WITH changed AS ({} RETURNING id), kept AS ({retained})
         SELECT count(*) FROM changed",
        numbered(CHANGE_SQL)
    )
}

static NUMBERED: LazyLock<Numbered> = LazyLock::new(|| Numbered {
    reserve: reserve(),
    reserve_binding: reserve_binding(),
    retained: numbered(RETAINED_SQL),
    retain: numbered(RETAIN_SQL),
    collected: numbered(COLLECTED_SQL),
    deliver_held: numbered(DELIVER_HELD_SQL),
    forget: numbered(DROP_SQL),
    sweep: numbered(SWEEP_SQL),
    precheck: numbered(PRECHECK_SQL),
    change: numbered(CHANGE_SQL),
    change_storing: change_with(
        "UPDATE retained_answers SET sealed = $10, kind = $11, collectable_until = $12,
         id_sha256 = CASE WHEN $13 THEN NULL ELSE id_sha256 END
         WHERE attempt_id IN (SELECT id FROM changed)",
    ),
    change_dropping: change_with(
        "DELETE FROM retained_answers WHERE attempt_id IN (SELECT id FROM changed)",
    ),
    change_releasing_id: change_with(
        "UPDATE retained_answers SET id_sha256 = NULL WHERE attempt_id IN (SELECT id FROM changed)",
    ),
    row_by_nonce: numbered(ROW_BY_NONCE_SQL),
});

/// A pooled PostgreSQL ledger.
pub struct PostgresLedger {
    pool: Pool,
    migrated: OnceCell<()>,
    /// Bound on one statement's round trip: a database that stops answering is unavailable.
    statement_timeout: Duration,
}

/// A reserve with its binding failed: a unique index of the retained answers (the lookup or
/// the `id`) means the `id` is bound already; the nonce's is a duplicate payment.
fn reserve_error(error: &tokio_postgres::Error) -> LedgerError {
    match storage_error(error) {
        LedgerError::Duplicate
            if error.as_db_error().and_then(|db| db.table()) == Some("retained_answers") =>
        {
            LedgerError::IdentifierBound
        }
        other => other,
    }
}

fn storage_error(error: &tokio_postgres::Error) -> LedgerError {
    if error.code() == Some(&SqlState::UNIQUE_VIOLATION) {
        LedgerError::Duplicate
    } else if refused(error) {
        LedgerError::Refused(with_causes(error))
    } else if error.is_closed() || error.as_db_error().is_none() {
        LedgerError::Unavailable(error.to_string())
    } else {
        LedgerError::Storage(error.to_string())
    }
}

/// The server refused this configuration rather than failing: authentication (class 28:
/// wrong credentials, or no `pg_hba.conf` line for this host with or without encryption),
/// a certificate that failed our check, or no TLS where the settings require it.
fn refused(error: &tokio_postgres::Error) -> bool {
    let class_28 = error
        .as_db_error()
        .is_some_and(|db| db.code().code().starts_with("28"));
    class_28
        || tls::is_certificate_failure(error)
        || error.to_string().contains("server does not support TLS")
}

/// An error with the causes it wraps ("error performing TLS handshake: invalid peer
/// certificate: …"): the operator must see why.
fn with_causes(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = inner.source();
    }
    text
}

impl From<tokio_postgres::Error> for LedgerError {
    fn from(error: tokio_postgres::Error) -> Self {
        storage_error(&error)
    }
}

impl From<deadpool_postgres::PoolError> for LedgerError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        match &error {
            deadpool_postgres::PoolError::Backend(backend) if refused(backend) => {
                LedgerError::Refused(with_causes(backend))
            }
            _ => LedgerError::Unavailable(error.to_string()),
        }
    }
}

/// A row's `ROW_COLUMNS`, starting at column `at`.
fn attempt_row(row: &Row, at: usize) -> AttemptRow {
    AttemptRow {
        id: row.get(at),
        machine: row.get(at + 1),
        family: row.get(at + 2),
        payer: row.get(at + 3),
        amount_atomic: row.get(at + 4),
        asset: row.get(at + 5),
        network: row.get(at + 6),
        pay_to: row.get(at + 7),
        state: row.get(at + 8),
        transaction_hash: row.get(at + 9),
        nonce: row.get(at + 10),
        valid_before: row.get(at + 11),
        failure_reason: row.get(at + 12),
        evidence: row.get(at + 13),
        created_at: row.get(at + 14),
        request_id: row.get(at + 15),
        transfer_log_index: row.get(at + 16),
        request_sha256: row.get(at + 17),
        collected_again: row.get(at + 18),
        updated_at: row.get(at + 19),
    }
}

/// Below `verify-full`, a connection to another machine can be read or answered by whoever
/// sits between: said once at start-up.
fn warn_if_open_to_interception(settings: &tls::TlsSettings, config: &tokio_postgres::Config) {
    if settings.mode == tls::SslMode::VerifyFull {
        return;
    }
    let hosts = tls::remote_hosts(config);
    if !hosts.is_empty() {
        tracing::warn!(
            tls = %settings,
            hosts = %hosts.join(","),
            "the ledger database is on another host and its certificate and name are not both verified: the connection is open to interception; set sslmode=verify-full and sslrootcert"
        );
    }
}

impl PostgresLedger {
    /// Builds the pool; nothing connects until the first statement.
    pub fn open(database_url: &str, options: PoolOptions) -> Result<PostgresLedger, LedgerError> {
        let not_a_url = || {
            LedgerError::Storage(format!(
                "{} is not a PostgreSQL connection URL",
                redacted(database_url)
            ))
        };
        let connection = tls::split(database_url)?.ok_or_else(not_a_url)?;
        let mut config: tokio_postgres::Config = connection.url.parse().map_err(|_| not_a_url())?;
        let tls = tls::connector(&connection.settings, &mut config)?;
        warn_if_open_to_interception(&connection.settings, &config);
        config.connect_timeout(options.connect_timeout);
        config.application_name("factomat");
        // A commit returns only once it is durable: a retained answer and its `settled`
        // record survive a crash together, whatever the server's default.
        config.options("-c synchronous_commit=on");
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| LedgerError::Storage(format!("connection pool: {e}")))?;
        Ok(PostgresLedger {
            pool,
            migrated: OnceCell::new(),
            statement_timeout: options.connect_timeout.saturating_mul(2),
        })
    }

    /// Migrates once per process; a failure is retried by the next call.
    pub(super) async fn ready(&self) -> Result<(), LedgerError> {
        self.migrated
            .get_or_try_init(|| self.bounded(self.migrate()))
            .await
            .map(|_| ())
    }

    async fn migrate(&self) -> Result<(), LedgerError> {
        let mut client = self.pool.get().await?;
        let transaction = client.transaction().await?;
        transaction
            .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        transaction
            .batch_execute(
                &(schema("BIGSERIAL")
                    + ADD_COLUMNS
                    + &current_states()
                    + INDEXES
                    + &retained_schema("BYTEA")),
            )
            .await?;
        transaction.commit().await?;
        tracing::info!("PostgreSQL ledger schema is current");
        Ok(())
    }

    /// Runs one ledger operation within the statement timeout.
    async fn bounded<T>(
        &self,
        operation: impl Future<Output = Result<T, LedgerError>>,
    ) -> Result<T, LedgerError> {
        tokio::time::timeout(self.statement_timeout, operation)
            .await
            .unwrap_or_else(|_| {
                Err(LedgerError::Unavailable(format!(
                    "no answer within {} ms",
                    self.statement_timeout.as_millis()
                )))
            })
    }

    pub(super) async fn select(&self, sql: &str) -> Result<Vec<AttemptRow>, LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let client = self.pool.get().await?;
            let rows = client.query(sql, &[]).await?;
            Ok(rows.iter().map(|row| attempt_row(row, 0)).collect())
        })
        .await
    }

    pub(super) async fn row_by_nonce(
        &self,
        nonce_sha256: &str,
    ) -> Result<Option<AttemptRow>, LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let client = self.pool.get().await?;
            let statement = client.prepare_cached(&NUMBERED.row_by_nonce).await?;
            let row = client.query_opt(&statement, &[&nonce_sha256]).await?;
            Ok(row.map(|row| attempt_row(&row, 0)))
        })
        .await
    }

    pub(super) async fn reserve(
        &self,
        a: &NewAttempt,
        binding: Option<&Binding>,
    ) -> Result<i64, LedgerError> {
        self.ready().await?;
        let at = now();
        let columns: [Param<'_>; 13] = [
            &a.machine,
            &a.family,
            &a.payer,
            &a.amount_atomic,
            &a.asset,
            &a.network,
            &a.pay_to,
            &a.nonce_sha256,
            &a.nonce,
            &a.valid_before,
            &a.request_sha256,
            &a.request_id,
            &at,
        ];
        self.bounded(async {
            let client = self.pool.get().await?;
            let row = match binding {
                None => {
                    let statement = client.prepare_cached(&NUMBERED.reserve).await?;
                    client.query_one(&statement, &columns).await?
                }
                Some(binding) => {
                    let statement = client.prepare_cached(&NUMBERED.reserve_binding).await?;
                    let arguments: Vec<Param<'_>> = columns
                        .into_iter()
                        .chain([&binding.lookup_sha256 as Param<'_>, &binding.id_sha256])
                        .collect();
                    client
                        .query_one(&statement, &arguments)
                        .await
                        .map_err(|error| reserve_error(&error))?
                }
            };
            Ok(row.get(0))
        })
        .await
    }

    pub(super) async fn retained(
        &self,
        lookup_sha256: &str,
        id_sha256: Option<&str>,
    ) -> Result<Vec<Retained>, LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let client = self.pool.get().await?;
            let statement = client.prepare_cached(&NUMBERED.retained).await?;
            let rows = client
                .query(&statement, &[&lookup_sha256, &id_sha256])
                .await?;
            Ok(rows
                .iter()
                .map(|row| Retained {
                    lookup_sha256: row.get(0),
                    id_sha256: row.get(1),
                    kind: row.get(2),
                    sealed: row.get(3),
                    collectable_until: row.get(4),
                    attempt: attempt_row(row, 5),
                })
                .collect())
        })
        .await
    }

    pub(super) async fn retain(
        &self,
        id: i64,
        binding: &Binding,
        sealed: &[u8],
        collectable_until: i64,
    ) -> Result<(), LedgerError> {
        let at = now();
        let arguments: [Param<'_>; 6] = [
            &binding.lookup_sha256,
            &id,
            &binding.id_sha256,
            &sealed,
            &collectable_until,
            &at,
        ];
        self.execute(&NUMBERED.retain, &arguments).await.map(|_| ())
    }

    pub(super) async fn deliver_held(
        &self,
        id: i64,
        sealed: &[u8],
        collectable_until: i64,
    ) -> Result<bool, LedgerError> {
        let stored = self
            .execute(&NUMBERED.deliver_held, &[&sealed, &collectable_until, &id])
            .await?;
        Ok(stored == 1)
    }

    pub(super) async fn forget(&self, id: i64) -> Result<(), LedgerError> {
        self.execute(&NUMBERED.forget, &[&id]).await.map(|_| ())
    }

    pub(super) async fn note_collected(&self, id: i64) -> Result<(), LedgerError> {
        self.execute(&NUMBERED.collected, &[&id]).await.map(|_| ())
    }

    /// `horizon`: settled before it, a binding without an answer or a held result goes.
    pub(super) async fn sweep_retained(&self, now: i64, horizon: &str) -> Result<u64, LedgerError> {
        self.execute(&NUMBERED.sweep, &[&now, &horizon]).await
    }

    /// One statement (numbered), within the statement timeout.
    async fn execute(&self, sql: &str, arguments: &[Param<'_>]) -> Result<u64, LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let client = self.pool.get().await?;
            let statement = client.prepare_cached(sql).await?;
            Ok(client.execute(&statement, arguments).await?)
        })
        .await
    }

    pub(super) async fn precheck(
        &self,
        nonce_sha256: &str,
        payer_lower: &str,
        now: i64,
    ) -> Result<Precheck, LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let client = self.pool.get().await?;
            let statement = client.prepare_cached(&NUMBERED.precheck).await?;
            let row = client
                .query_one(&statement, &[&nonce_sha256, &payer_lower, &now])
                .await?;
            Ok(Precheck {
                nonce_known: row.get(0),
                payer_struck: row.get(1),
            })
        })
        .await
    }

    pub(super) async fn change(
        &self,
        id: i64,
        from: &str,
        c: &Change<'_>,
        retained: &RetainedChange<'_>,
    ) -> Result<bool, LedgerError> {
        self.ready().await?;
        let at = now();
        let row: [Param<'_>; 9] = [
            &c.state,
            &c.transaction,
            &c.transfer_log_index,
            &c.failure_reason,
            &c.evidence,
            &c.strike_until,
            &at,
            &id,
            &from,
        ];
        self.bounded(async {
            let client = self.pool.get().await?;
            let (sql, extra): (&str, Vec<Param<'_>>) = match retained {
                RetainedChange::None => {
                    let statement = client.prepare_cached(&NUMBERED.change).await?;
                    return Ok(client.execute(&statement, &row).await? == 1);
                }
                RetainedChange::Store {
                    sealed,
                    kind,
                    collectable_until,
                    release_id,
                } => (
                    &NUMBERED.change_storing,
                    vec![sealed as Param<'_>, kind, collectable_until, release_id],
                ),
                RetainedChange::Drop => (&NUMBERED.change_dropping, Vec::new()),
                RetainedChange::ReleaseId => (&NUMBERED.change_releasing_id, Vec::new()),
            };
            let statement = client.prepare_cached(sql).await?;
            let arguments: Vec<Param<'_>> = row.into_iter().chain(extra).collect();
            let changed: i64 = client.query_one(&statement, &arguments).await?.get(0);
            Ok(changed == 1)
        })
        .await
    }

    pub(super) async fn counts_by_state(&self) -> Result<Vec<(String, i64)>, LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let client = self.pool.get().await?;
            let statement = client
                .prepare_cached("SELECT state, COUNT(*) FROM payment_attempts GROUP BY state")
                .await?;
            let rows = client.query(&statement, &[]).await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
        .await
    }

    /// An UPDATE that matches no row, in a transaction rolled back: a read-only server (a
    /// standby, `default_transaction_read_only`) or a database that does not answer fails
    /// here, and nothing changes.
    pub(super) async fn check_writable(&self) -> Result<(), LedgerError> {
        self.ready().await?;
        self.bounded(async {
            let mut client = self.pool.get().await?;
            let transaction = client.transaction().await?;
            transaction
                .execute(
                    "UPDATE payment_attempts SET updated_at = updated_at WHERE false",
                    &[],
                )
                .await?;
            transaction.rollback().await?;
            Ok(())
        })
        .await
    }
}
