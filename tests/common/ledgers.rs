//! Tests that run once per ledger backend: `on_both_ledgers!(name, …)` makes
//! `sqlite_ledger::name` and `postgres_ledger::name`, and each body asks [`fresh_ledger_url`]
//! for a new ledger of its backend.
#![allow(dead_code)]

use std::path::PathBuf;

use factomat::pay::ledger::{AttemptRow, Ledger, NewAttempt, PoolOptions};
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use super::temp_path;

/// Which ledger backend a test runs against (set per test by `on_both_ledgers!`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    pub static BACKEND: Backend;
}

/// The backend of the running test (SQLite outside `on_both_ledgers!`).
pub fn backend() -> Backend {
    BACKEND.try_with(|b| *b).unwrap_or(Backend::Sqlite)
}

/// A fresh ledger of the test's backend.
pub fn fresh_ledger_url() -> String {
    match backend() {
        Backend::Sqlite => format!("sqlite:{}", temp_path("ledger.db").display()),
        Backend::Postgres => super::postgres::fresh_database(),
    }
}

/// Every row of a ledger, through the engine's own reader.
pub async fn rows_of(url: &str) -> Vec<AttemptRow> {
    Ledger::open(url, PoolOptions::default())
        .expect("ledger")
        .rows()
        .await
        .expect("rows")
}

/// The database file a `sqlite:PATH` ledger URL names.
pub fn sqlite_file(url: &str) -> PathBuf {
    let path = url
        .strip_prefix("sqlite:")
        .expect("a sqlite:PATH ledger URL");
    PathBuf::from(path.strip_prefix("//").unwrap_or(path))
}

/// How many rows a table of a SQLite ledger holds, read beside the running server (a
/// read-only connection, which never checkpoints the WAL).
pub fn sqlite_count(url: &str, table: &str) -> i64 {
    let connection =
        Connection::open_with_flags(sqlite_file(url), OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("the ledger file opens");
    connection
        .busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    connection
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap_or_else(|e| panic!("SELECT COUNT(*) FROM {table}: {e}"))
}

/// Runs SQL on a ledger of either backend (to shape rows as an older build, or a crash, left
/// them).
pub fn execute_sql(url: &str, sql: &str) {
    if url.starts_with("sqlite:") {
        Connection::open(sqlite_file(url))
            .and_then(|c| c.execute_batch(sql))
            .expect("sqlite");
    } else {
        super::postgres::psql(url, sql);
    }
}

/// A VM02 attempt as the gate reserves it: `payer`'s, its nonce and the nonce's hash both
/// `nonce_byte` repeated, payable to [`super::PAY_TO`].
pub fn vm02_attempt(payer: &str, nonce_byte: &str, valid_before: u64) -> NewAttempt {
    NewAttempt {
        machine: "VM02".into(),
        family: "ONCHAIN_PREFLIGHT".into(),
        payer: payer.into(),
        amount_atomic: "10000".into(),
        asset: super::paid_rig::USDC.into(),
        network: "eip155:8453".into(),
        pay_to: super::PAY_TO.into(),
        nonce_sha256: nonce_byte.repeat(32),
        nonce: format!("0x{}", nonce_byte.repeat(32)),
        valid_before: valid_before.to_string(),
        request_sha256: "cd".repeat(32),
        request_id: format!("attempt-{nonce_byte}"),
    }
}

/// `factomat ledger ARGS --json` on the ledger at `database_url` (`rpc_url` for the commands
/// that read the chain): its JSON answer; fails on a non-zero exit.
pub fn ledger_cli(database_url: &str, rpc_url: Option<&str>, args: &[&str]) -> Value {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_factomat"));
    command
        .arg("ledger")
        .args(args)
        .arg("--json")
        .env("FACTOMAT_DATABASE_URL", database_url);
    if let Some(rpc_url) = rpc_url {
        command.env("FACTOMAT_RPC_URL_EIP155_8453", rpc_url);
    }
    let output = command.output().expect("factomat ledger runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

/// The entry of `report[list]` whose `key` is `value` (a family or machine of `ledger report`).
pub fn report_entry(report: &Value, list: &str, key: &str, value: &str) -> Value {
    report[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list} in {report}"))
        .iter()
        .find(|entry| entry[key] == value)
        .cloned()
        .unwrap_or_else(|| panic!("{key} {value} in {report}"))
}

/// Runs each named async test body once per ledger backend.
#[macro_export]
macro_rules! on_both_ledgers {
    ($($name:ident),* $(,)?) => {
        mod sqlite_ledger {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::common::ledgers::BACKEND
                        .scope($crate::common::ledgers::Backend::Sqlite, super::$name())
                        .await
                }
            )*
        }
        mod postgres_ledger {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::common::ledgers::BACKEND
                        .scope($crate::common::ledgers::Backend::Postgres, super::$name())
                        .await
                }
            )*
        }
    };
}
