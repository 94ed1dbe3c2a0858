//! The settlement ledger: one row per paid attempt, so nothing paid is lost and nothing is
//! charged twice.
//!
//! A row holds what accounting needs and nothing a buyer would not want kept: never a
//! response body, a purchased page, the raw payment payload or its signature. The nonce's
//! sha256 is unique: two requests carrying one authorization can never both reserve, however
//! many arrive at once — in one process (SQLite) or on any number of replicas sharing one
//! PostgreSQL database. The nonce itself and `validBefore` are kept too (public once settled,
//! useless without the signature): they are what reconciliation asks the chain about.
//!
//! Retained paid answers (`pay::retained`) live in their own table, `retained_answers`:
//! sealed, keyed by a hash, deleted when they expire or their payment ends unpaid for good.
//! A row of `payment_attempts` never holds an answer.

mod postgres;
mod sqlite;
pub mod tls;

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

/// How an attempt ended, or what the chain later showed about it: the row's new state and
/// the columns that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Paid: the facilitator's success, or a receipt with the payment's Transfer.
    Settled {
        /// The settlement transaction.
        transaction: String,
        /// The proving Transfer's log index when the chain was read: one (transaction, log
        /// index) proves at most one row.
        transfer_log_index: Option<u64>,
        /// What the chain showed, when it was read.
        evidence: Option<String>,
    },
    /// The outcome is unknown: the facilitator broadcast, timed out or failed naming a
    /// transaction, and the chain has not decided within the wait.
    SettlePending {
        /// The transaction the facilitator named, if any.
        transaction: Option<String>,
        /// What the chain showed.
        evidence: String,
    },
    /// Unpaid for sure; the result was withheld.
    SettleFailed {
        /// Why.
        reason: String,
        /// What the chain showed, when it was read.
        evidence: Option<String>,
        /// Until when the payer is refused before `/verify` (unix seconds).
        strike_until: Option<u64>,
    },
    /// The nonce was spent by another authorization or cancelled: never paid, never revenue.
    NonceBurned {
        /// The transaction that spent it.
        transaction: String,
        /// What the chain showed.
        evidence: String,
        /// Until when the payer is refused before `/verify` (unix seconds).
        strike_until: Option<u64>,
    },
    /// The work failed; nothing was settled.
    WorkFailed {
        /// Why.
        reason: String,
    },
    /// Unused and past `validBefore`: nothing was or ever will be charged.
    Expired {
        /// What the chain showed.
        evidence: String,
    },
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
    /// Our payTo when the row was reserved: the address a proving Transfer must pay.
    pub pay_to: String,
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
    /// The log index of the Transfer that proved the payment, when the chain was read.
    pub transfer_log_index: Option<i64>,
    /// sha256 of the canonical request the payment bought.
    pub request_sha256: String,
    /// How many times its answer was collected again from the retained answers.
    pub collected_again: i64,
    /// When the row last changed state (RFC 3339): for a `settled` row, when it was recorded
    /// settled.
    pub updated_at: String,
}

/// Where a paid call's answer will be retained, bound when the call is reserved.
#[derive(Debug, Clone)]
pub struct Binding {
    /// The lookup key (hex) of the exact payload and request.
    pub lookup_sha256: String,
    /// The scoped hash of the payment-identifier `id`, if the payload carries one.
    pub id_sha256: Option<String>,
}

/// What a row change does to the row's retained answer. Whatever is asked, an outcome that
/// is unpaid for good (`nonce_burned`, `work_failed`, `expired`, and `settle_failed` read
/// unused past `validBefore`) deletes it; a refusal before broadcasting may still be
/// executed, so its result may be held.
#[derive(Debug, Clone, Copy)]
pub enum Keep<'a> {
    /// Leave it as it is.
    Untouched,
    /// Delete it: the answer was delivered and none is kept of it (its window is zero), so a
    /// binding left on a settled row always means an answer never delivered.
    Forget,
    /// Store the sealed answer: `held` while its settlement is pending (the body only, no
    /// payment headers yet); `collectable_until` None keeps it until the row resolves.
    Store {
        /// The sealed answer.
        sealed: &'a [u8],
        /// True while the payment's outcome is unknown.
        held: bool,
        /// Until when it may be collected (unix seconds).
        collectable_until: Option<i64>,
    },
}

/// A retained answer and the settlement row it belongs to.
#[derive(Debug, Clone)]
pub struct Retained {
    /// Its lookup key (hex).
    pub lookup_sha256: String,
    /// The scoped hash of the `id` it was bought with, if any.
    pub id_sha256: Option<String>,
    /// `in_flight` (reserved, no answer yet), `held` (settlement pending) or `sent`.
    pub kind: String,
    /// The sealed answer, once there is one.
    pub sealed: Option<Vec<u8>>,
    /// Until when it may be collected (unix seconds); None until its row resolves.
    pub collectable_until: Option<i64>,
    /// Its settlement row.
    pub attempt: AttemptRow,
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
    /// The payment-identifier `id` is already bound to another payment.
    #[error("this payment identifier is bound to another payment")]
    IdentifierBound,
    /// The database URL's TLS settings cannot be used.
    #[error(transparent)]
    TlsSettings(#[from] tls::TlsSettingError),
    /// The server was reached and refused this configuration: its certificate failed our
    /// check, it asked for TLS we do not use, or it refused the credentials. Retrying does
    /// not help; the settings must change.
    #[error("the ledger database refused the connection: {0}")]
    Refused(String),
}

impl LedgerError {
    /// True when the settings, not an outage, keep the ledger from working.
    pub fn is_refusal(&self) -> bool {
        matches!(self, LedgerError::TlsSettings(_) | LedgerError::Refused(_))
    }
}

/// What the ledger says before `/verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precheck {
    /// The nonce is already on record (any state).
    pub nonce_known: bool,
    /// A payment of this payer ended unpaid after `/verify` within the cooling period.
    pub payer_struck: bool,
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

/// [`UNUSED_PAST_VALID_BEFORE`] (a macro, so that statements can be `concat!`ed from it).
macro_rules! unused_past_valid_before {
    () => {
        "settlement_failed"
    };
}

/// The `failure_reason` of a row read unused at a block past `validBefore`: unpaid, and it
/// never can be paid (also the reason its buyer hears).
pub const UNUSED_PAST_VALID_BEFORE: &str = unused_past_valid_before!();

/// Whether a `settle_failed` row's authorization may still be executed: it was refused
/// before broadcasting (a reason other than [`UNUSED_PAST_VALID_BEFORE`]), and stays valid
/// until `validBefore`.
pub fn refusal_may_still_run(failure_reason: Option<&str>) -> bool {
    failure_reason != Some(UNUSED_PAST_VALID_BEFORE)
}

/// The columns every backend selects, in `AttemptRow` order (a macro, so that statements
/// can be `concat!`ed from it at compile time).
macro_rules! row_columns {
    () => {
        "id, machine, family, payer, amount_atomic, asset, network, pay_to,
    state, transaction_hash, nonce, valid_before, failure_reason, evidence, created_at,
    request_id, transfer_log_index, request_sha256, collected_again, updated_at"
    };
}

/// The columns every backend selects, in `AttemptRow` order.
const ROW_COLUMNS: &str = row_columns!();

/// The row of one nonce's sha256 (the nonce is bound, so the statement is prepared once).
const ROW_BY_NONCE_SQL: &str = concat!(
    "SELECT ",
    row_columns!(),
    " FROM payment_attempts WHERE nonce_sha256 = ?1"
);

/// A lookup by key or by `id` (none of the tables' column names overlap, so the join needs no
/// prefixes).
const RETAINED_SQL: &str = concat!(
    "SELECT lookup_sha256, id_sha256, kind, sealed, collectable_until, ",
    row_columns!(),
    " FROM retained_answers JOIN payment_attempts ON id = attempt_id
     WHERE lookup_sha256 = ?1 OR id_sha256 = ?2"
);

/// A reserved row: its columns, `?1`–`?12`, and its time `?13`.
const RESERVE_SQL: &str = "INSERT INTO payment_attempts (machine, family, payer, amount_atomic,
     asset, network, pay_to, nonce_sha256, nonce, valid_before, request_sha256, request_id,
     state, created_at, updated_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'reserved', ?13, ?13)";

/// The columns a binding writes, in this order: the lookup, the row, the `id`'s hash, the
/// kind and the time (SQLite's [`BIND_SQL`] and PostgreSQL's reserve with its binding, [`BINDING_INSERT`]).
macro_rules! binding_columns {
    () => {
        "INSERT INTO retained_answers (lookup_sha256, attempt_id, id_sha256, kind, retained_at)"
    };
}

/// The head of a binding's insert, for PostgreSQL's reserve with its binding.
const BINDING_INSERT: &str = binding_columns!();

/// Binds a reserved call to where its answer will be retained.
const BIND_SQL: &str = concat!(binding_columns!(), " VALUES (?1, ?2, ?3, 'in_flight', ?4)");

/// Retains the answer of a row that has none yet (the work run again for a paid row), or
/// replaces its binding's.
const RETAIN_SQL: &str = "INSERT INTO retained_answers (lookup_sha256, attempt_id, id_sha256,
     kind, sealed, collectable_until, retained_at) VALUES (?1, ?2, ?3, 'sent', ?4, ?5, ?6)
     ON CONFLICT (lookup_sha256) DO UPDATE SET kind = 'sent', sealed = excluded.sealed,
     collectable_until = excluded.collectable_until";

/// Stores a row's sealed answer; `?5` releases its payment-identifier `id`.
const STORE_SQL: &str = "UPDATE retained_answers SET sealed = ?1, kind = ?2,
     collectable_until = ?3, id_sha256 = CASE WHEN ?5 THEN NULL ELSE id_sha256 END
     WHERE attempt_id = ?4";

/// Forgets a row's retained answer.
const DROP_SQL: &str = "DELETE FROM retained_answers WHERE attempt_id = ?1";

/// Lets go of a row's binding's payment-identifier `id`.
const RELEASE_ID_SQL: &str = "UPDATE retained_answers SET id_sha256 = NULL WHERE attempt_id = ?1";

/// A held answer of a row already recorded `settled` becomes the sent one; only while it is
/// still held, so of two concurrent resends one stores (and counts) it.
const DELIVER_HELD_SQL: &str = "UPDATE retained_answers SET sealed = ?1, kind = 'sent',
     collectable_until = ?2 WHERE attempt_id = ?3 AND kind = 'held'";

/// One more collection of a row's answer.
const COLLECTED_SQL: &str =
    "UPDATE payment_attempts SET collected_again = collected_again + 1 WHERE id = ?1";

/// Deletes answers past their window, and bindings whose call ended without an answer.
/// A settled row's binding without an answer, or its result held for a buyer told
/// "pending", stays while the row's settlement (`updated_at`) is newer than `?2` (the held
/// results' window): its identical resend runs the work once more, or collects the result,
/// and a reconcile may settle the row long before the buyer comes back for it. The result
/// held for a refusal before broadcasting stays as long, unless the chain decides first
/// (its authorization runs out at `validBefore`, long before): so it goes even with the
/// reconcile pass off.
const SWEEP_SQL: &str = concat!(
    "DELETE FROM retained_answers
     WHERE (kind = 'sent' AND collectable_until < ?1)
        OR (kind <> 'sent' AND attempt_id IN (SELECT id FROM payment_attempts
            WHERE state IN ('nonce_burned', 'work_failed', 'expired')
               OR (state = 'settle_failed' AND failure_reason = '",
    unused_past_valid_before!(),
    "')
               OR (state IN ('settled', 'settle_failed') AND updated_at < ?2)))"
);

/// The retained answers table; `blob` is the backend's byte-string type.
fn retained_schema(blob: &str) -> String {
    format!(
        "
CREATE TABLE IF NOT EXISTS retained_answers (
    lookup_sha256     TEXT PRIMARY KEY,
    attempt_id        BIGINT NOT NULL,
    id_sha256         TEXT UNIQUE,
    kind              TEXT NOT NULL CHECK (kind IN ('in_flight', 'held', 'sent')),
    sealed            {blob},
    collectable_until BIGINT,
    retained_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS retained_answers_attempt ON retained_answers (attempt_id);
"
    )
}

/// What a change does to the row's retained answer, as SQL and its arguments.
enum RetainedChange<'a> {
    None,
    Store {
        sealed: &'a [u8],
        kind: &'static str,
        collectable_until: Option<i64>,
        /// The binding lets go of its payment-identifier `id`: a refused payment's buyer
        /// retries the same `id` with a new payment, which must not meet a conflict.
        release_id: bool,
    },
    Drop,
    /// Only let go of the binding's payment-identifier `id` (see `Store::release_id`).
    ReleaseId,
}

impl<'a> RetainedChange<'a> {
    fn of(change: &Change<'_>, keep: Keep<'a>) -> RetainedChange<'a> {
        match (change.unpaid_for_good(), keep) {
            (true, _) => RetainedChange::Drop,
            (
                _,
                Keep::Store {
                    sealed,
                    held,
                    collectable_until,
                },
            ) => RetainedChange::Store {
                sealed,
                kind: if held { "held" } else { "sent" },
                collectable_until,
                release_id: change.state == "settle_failed",
            },
            (_, Keep::Forget) => RetainedChange::Drop,
            (_, Keep::Untouched) if change.state == "settle_failed" => RetainedChange::ReleaseId,
            (_, Keep::Untouched) => RetainedChange::None,
        }
    }
}

/// Unix seconds as the ledger's timestamps are written (`now_millis`), so that text order is
/// time order.
fn settled_before(unix_seconds: u64) -> String {
    let seconds = i64::try_from(unix_seconds).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp(seconds, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The rows whose outcome the chain may still change ([`Ledger::undecided`]).
const UNDECIDED: &str = concat!(
    "WHERE state IN ('reserved', 'settle_pending') OR (state = 'settle_failed'
     AND nonce IS NOT NULL AND COALESCE(failure_reason, '') <> '",
    unused_past_valid_before!(),
    "')"
);

/// The states a row can be in (docs/payment.md draws their transitions).
pub const STATES: [&str; 7] = [
    "reserved",
    "settled",
    "settle_pending",
    "settle_failed",
    "nonce_burned",
    "work_failed",
    "expired",
];

/// The states whose outcome the chain must still tell.
pub const UNRESOLVED: [&str; 3] = ["reserved", "settle_pending", "settle_failed"];

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
    state            TEXT NOT NULL CONSTRAINT payment_attempts_state_check CHECK (state IN
                     ({STATE_LIST})),
    transaction_hash TEXT,
    transfer_log_index BIGINT,
    strike_until     BIGINT,
    failure_reason   TEXT,
    evidence         TEXT,
    collected_again  BIGINT NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS payment_attempts_state ON payment_attempts (state);
"
    )
}

/// The states as an SQL list.
const STATE_LIST: &str = "'reserved', 'settled', 'settle_pending', 'settle_failed', 'nonce_burned',
                     'work_failed', 'expired'";

/// Indexes over columns a migration may add, so created after it: one Transfer proves one
/// row, and struck payers are found by their lower-cased address and strike (the pre-check
/// reads only a payer's struck rows, not every row the payer ever paid).
///
/// Both are partial: a row enters the first when it names a transaction and the second when
/// it is struck. A fresh reservation names neither, so reserving and recording a paid call
/// touch neither index, which keeps two pages out of each commit's write-ahead log. Queries
/// still use them: `strike_until > ?` implies the strike is not null, and a row without a
/// transaction was never in the uniqueness check (nulls are distinct). The full indexes
/// of earlier releases (and the first release's payer-only index) are dropped.
const INDEXES: &str = "
DROP INDEX IF EXISTS payment_attempts_transfer;
CREATE UNIQUE INDEX IF NOT EXISTS payment_attempts_transfer_proof
    ON payment_attempts (transaction_hash, transfer_log_index)
    WHERE transaction_hash IS NOT NULL;
DROP INDEX IF EXISTS payment_attempts_payer;
DROP INDEX IF EXISTS payment_attempts_payer_strike;
CREATE INDEX IF NOT EXISTS payment_attempts_struck
    ON payment_attempts (lower(payer), strike_until)
    WHERE strike_until IS NOT NULL;
";

/// One row change: the new state and the columns it sets (None keeps a column's value,
/// except the log index and the strike, which each change sets).
struct Change<'a> {
    state: &'static str,
    transaction: Option<&'a str>,
    transfer_log_index: Option<i64>,
    failure_reason: Option<&'a str>,
    evidence: Option<&'a str>,
    strike_until: Option<i64>,
}

/// The UPDATE both backends run (PostgreSQL's copy numbers its placeholders `$n`).
/// A row's strike outlives its later changes (a `settle_failed` row that reconcile expires
/// keeps its payer refused) unless the row turns out paid.
const CHANGE_SQL: &str = "UPDATE payment_attempts
     SET state = ?1, transaction_hash = COALESCE(?2, transaction_hash),
         transfer_log_index = ?3, failure_reason = COALESCE(?4, failure_reason),
         evidence = COALESCE(?5, evidence),
         strike_until = CASE WHEN ?1 = 'settled' THEN NULL ELSE COALESCE(?6, strike_until) END,
         updated_at = ?7
     WHERE id = ?8 AND state = ?9";

/// The pre-`/verify` query both backends run: is the nonce known, is the payer struck?
const PRECHECK_SQL: &str = "SELECT
     EXISTS (SELECT 1 FROM payment_attempts WHERE nonce_sha256 = ?1),
     EXISTS (SELECT 1 FROM payment_attempts WHERE lower(payer) = ?2 AND strike_until > ?3)";

impl Change<'_> {
    /// True when the change leaves the row unpaid for good: nothing of its answer is kept.
    fn unpaid_for_good(&self) -> bool {
        match self.state {
            "nonce_burned" | "work_failed" | "expired" => true,
            "settle_failed" => !refusal_may_still_run(self.failure_reason),
            _ => false,
        }
    }
}

fn as_i64(value: Option<u64>) -> Option<i64> {
    value.and_then(|v| i64::try_from(v).ok())
}

impl Outcome {
    fn change(&self) -> Change<'_> {
        let empty = Change {
            state: "",
            transaction: None,
            transfer_log_index: None,
            failure_reason: None,
            evidence: None,
            strike_until: None,
        };
        match self {
            Outcome::Settled {
                transaction,
                transfer_log_index,
                evidence,
            } => Change {
                state: "settled",
                transaction: Some(transaction),
                transfer_log_index: as_i64(*transfer_log_index),
                evidence: evidence.as_deref(),
                ..empty
            },
            Outcome::SettlePending {
                transaction,
                evidence,
            } => Change {
                state: "settle_pending",
                transaction: transaction.as_deref(),
                evidence: Some(evidence),
                ..empty
            },
            Outcome::SettleFailed {
                reason,
                evidence,
                strike_until,
            } => Change {
                state: "settle_failed",
                failure_reason: Some(reason),
                evidence: evidence.as_deref(),
                strike_until: as_i64(*strike_until),
                ..empty
            },
            Outcome::NonceBurned {
                transaction,
                evidence,
                strike_until,
            } => Change {
                state: "nonce_burned",
                transaction: Some(transaction),
                evidence: Some(evidence),
                strike_until: as_i64(*strike_until),
                ..empty
            },
            Outcome::WorkFailed { reason } => Change {
                state: "work_failed",
                failure_reason: Some(reason),
                ..empty
            },
            Outcome::Expired { evidence } => Change {
                state: "expired",
                evidence: Some(evidence),
                ..empty
            },
        }
    }

    /// The state this outcome puts a row in.
    pub fn state(&self) -> &'static str {
        self.change().state
    }
}

/// The file a `sqlite:PATH` URL names; None for any other URL.
pub fn sqlite_path(database_url: &str) -> Option<std::path::PathBuf> {
    let path = database_url.strip_prefix("sqlite:")?;
    Some(std::path::PathBuf::from(
        path.strip_prefix("//").unwrap_or(path),
    ))
}

/// True when a URL names a PostgreSQL database.
pub fn is_postgres_url(database_url: &str) -> bool {
    database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")
}

/// A database URL safe to log: a password is replaced, in the user part or as a query
/// parameter (`?password=`, which the driver accepts too); an unparseable URL that is not a
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
            redact_query_passwords(&mut url);
            url.to_string()
        }
        Err(_) => "<unparseable database URL withheld>".into(),
    }
}

/// Replaces the value of every query parameter whose name ends in `password`.
fn redact_query_passwords(url: &mut url::Url) {
    let secret = |name: &str| name.to_ascii_lowercase().ends_with("password");
    if !url.query_pairs().any(|(name, _)| secret(&name)) {
        return;
    }
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(name, value)| {
            let value = if secret(&name) {
                "redacted".into()
            } else {
                value.into_owned()
            };
            (name.into_owned(), value)
        })
        .collect();
    url.query_pairs_mut().clear().extend_pairs(pairs);
}

/// The configured ledger backend.
pub enum Ledger {
    /// One process per `sqlite:PATH` file.
    Sqlite(SqliteLedger),
    /// Any number of replicas sharing one database.
    Postgres(PostgresLedger),
}

// PostgreSQL's futures (a pooled connection and its statements) are ~4 KB each, and the
// paid call awaits several in one task: inline, they made the task every paid call spawns
// ~9 KB on either backend, and copying it cost more than one heap allocation per statement,
// which is small beside the statement's network round trip.
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
            Ledger::Postgres(l) => Box::pin(l.ready()).await,
        }
    }

    /// Reserves an attempt; `Duplicate` when its nonce is already on record.
    pub async fn reserve(&self, attempt: &NewAttempt) -> Result<i64, LedgerError> {
        self.reserve_with(attempt, None).await
    }

    /// Reserves an attempt and, in the same transaction, binds where its answer will be
    /// retained. `Duplicate` when its nonce is already on record, `IdentifierBound` when its
    /// payment-identifier is bound to another payment.
    pub async fn reserve_bound(
        &self,
        attempt: &NewAttempt,
        binding: &Binding,
    ) -> Result<i64, LedgerError> {
        self.reserve_with(attempt, Some(binding)).await
    }

    async fn reserve_with(
        &self,
        attempt: &NewAttempt,
        binding: Option<&Binding>,
    ) -> Result<i64, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.reserve(attempt, binding),
            Ledger::Postgres(l) => Box::pin(l.reserve(attempt, binding)).await,
        }
    }

    /// The retained answers found by a lookup key or a scoped `id` hash, with their rows.
    pub async fn retained(
        &self,
        lookup_sha256: &str,
        id_sha256: Option<&str>,
    ) -> Result<Vec<Retained>, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.retained(lookup_sha256, id_sha256),
            Ledger::Postgres(l) => Box::pin(l.retained(lookup_sha256, id_sha256)).await,
        }
    }

    /// Retains the answer of a paid row outside its settlement (its work run again because no
    /// answer was retained): a `sent` answer under `binding`, open until `collectable_until`.
    pub async fn retain(
        &self,
        id: i64,
        binding: &Binding,
        sealed: &[u8],
        collectable_until: i64,
    ) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.retain(id, binding, sealed, collectable_until),
            Ledger::Postgres(l) => Box::pin(l.retain(id, binding, sealed, collectable_until)).await,
        }
    }

    /// Stores the finished answer of a row already recorded `settled` in place of its held
    /// result. False when it is no longer held (another resend stored it first).
    pub async fn deliver_held(
        &self,
        id: i64,
        sealed: &[u8],
        collectable_until: i64,
    ) -> Result<bool, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.deliver_held(id, sealed, collectable_until),
            Ledger::Postgres(l) => Box::pin(l.deliver_held(id, sealed, collectable_until)).await,
        }
    }

    /// Deletes a row's binding: its answer was delivered and none is kept of it.
    pub async fn forget(&self, id: i64) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.forget(id),
            Ledger::Postgres(l) => Box::pin(l.forget(id)).await,
        }
    }

    /// Counts one more collection of a row's answer (for `ledger report`).
    pub async fn note_collected(&self, id: i64) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.note_collected(id),
            Ledger::Postgres(l) => Box::pin(l.note_collected(id)).await,
        }
    }

    /// Deletes retained answers past their window (unix seconds `now`), bindings whose call
    /// ended unpaid, and bindings without an answer or held results of rows settled more than
    /// `held_window_seconds` ago; how many went. Idempotent: every replica runs it.
    pub async fn sweep_retained(
        &self,
        now: u64,
        held_window_seconds: u64,
    ) -> Result<u64, LedgerError> {
        let horizon = settled_before(now.saturating_sub(held_window_seconds));
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        match self {
            Ledger::Sqlite(l) => l.sweep_retained(now, &horizon),
            Ledger::Postgres(l) => Box::pin(l.sweep_retained(now, &horizon)).await,
        }
    }

    /// The row of a nonce's sha256, if it is on record.
    pub async fn row_by_nonce(
        &self,
        nonce_sha256: &str,
    ) -> Result<Option<AttemptRow>, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.row_by_nonce(nonce_sha256),
            Ledger::Postgres(l) => Box::pin(l.row_by_nonce(nonce_sha256)).await,
        }
    }

    /// True when a nonce is already on record (any state).
    pub async fn knows_nonce(&self, nonce_sha256: &str) -> Result<bool, LedgerError> {
        Ok(self.precheck(nonce_sha256, "", 0).await?.nonce_known)
    }

    /// The checks before `/verify`, in one statement: is the nonce on record, and is the
    /// payer (lower-cased address) refused until after `now` (unix seconds)?
    pub async fn precheck(
        &self,
        nonce_sha256: &str,
        payer_lower: &str,
        now: u64,
    ) -> Result<Precheck, LedgerError> {
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        match self {
            Ledger::Sqlite(l) => l.precheck(nonce_sha256, payer_lower, now),
            Ledger::Postgres(l) => Box::pin(l.precheck(nonce_sha256, payer_lower, now)).await,
        }
    }

    /// Records how a reserved attempt ended. `Duplicate` when its Transfer already proves
    /// another row.
    pub async fn finish(&self, id: i64, outcome: &Outcome) -> Result<(), LedgerError> {
        self.finish_keeping(id, outcome, Keep::Untouched).await
    }

    /// [`Ledger::finish`], storing the row's retained answer in the same transaction.
    pub async fn finish_keeping(
        &self,
        id: i64,
        outcome: &Outcome,
        keep: Keep<'_>,
    ) -> Result<(), LedgerError> {
        if self.resolve_keeping(id, "reserved", outcome, keep).await? {
            Ok(())
        } else {
            Err(LedgerError::Storage(format!(
                "attempt {id} is not reserved"
            )))
        }
    }

    /// Moves a row still in `from` to `outcome`. False when another process changed the row
    /// first; `Duplicate` when the outcome's Transfer already proves another row.
    pub async fn resolve(
        &self,
        id: i64,
        from: &str,
        outcome: &Outcome,
    ) -> Result<bool, LedgerError> {
        self.resolve_keeping(id, from, outcome, Keep::Untouched)
            .await
    }

    /// [`Ledger::resolve`], changing the row's retained answer in the same transaction.
    pub async fn resolve_keeping(
        &self,
        id: i64,
        from: &str,
        outcome: &Outcome,
        keep: Keep<'_>,
    ) -> Result<bool, LedgerError> {
        let change = outcome.change();
        let retained = RetainedChange::of(&change, keep);
        match self {
            Ledger::Sqlite(l) => l.change(id, from, &change, &retained),
            Ledger::Postgres(l) => Box::pin(l.change(id, from, &change, &retained)).await,
        }
    }

    /// How many rows are in each state (for metrics), counted in the store.
    pub async fn counts_by_state(&self) -> Result<Vec<(String, i64)>, LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.counts_by_state(),
            Ledger::Postgres(l) => Box::pin(l.counts_by_state()).await,
        }
    }

    /// Proves the store takes a write now (for readiness) without changing it.
    pub async fn check_writable(&self) -> Result<(), LedgerError> {
        match self {
            Ledger::Sqlite(l) => l.check_writable(),
            Ledger::Postgres(l) => Box::pin(l.check_writable()).await,
        }
    }

    /// Attempts still `reserved` (after a crash: paid work whose end is unknown).
    pub async fn reserved(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("WHERE state = 'reserved'").await
    }

    /// Rows whose settlement outcome the chain must tell: `reserved`, `settle_pending` and
    /// `settle_failed`.
    pub async fn unresolved(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select("WHERE state IN ('reserved', 'settle_pending', 'settle_failed')")
            .await
    }

    /// The rows whose outcome the chain may still change: every `reserved` and
    /// `settle_pending` row, and the `settle_failed` ones refused before broadcasting (the
    /// authorization may still be executed until `validBefore`) — not those read unused past
    /// `validBefore` ([`UNUSED_PAST_VALID_BEFORE`]), which are final.
    pub async fn undecided(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        self.select(UNDECIDED).await
    }

    /// The rows with these ids (reconcile re-checks rows it is asked about).
    pub async fn rows_by_id(&self, ids: &[i64]) -> Result<Vec<AttemptRow>, LedgerError> {
        let list: Vec<String> = ids.iter().map(i64::to_string).collect();
        self.select(&format!("WHERE id IN ({})", list.join(", ")))
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
            Ledger::Postgres(l) => Box::pin(l.select(&sql)).await,
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
        let query = redacted("postgres://factomat@db/ledger?password=hunter2&sslmode=verfy-full");
        assert!(!query.contains("hunter2"), "{query}");
        assert!(query.contains("sslmode=verfy-full"), "{query}");
        let cased = redacted("postgresql://db/ledger?user=f&PassWord=hunter2");
        assert!(!cased.contains("hunter2"), "{cased}");
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
