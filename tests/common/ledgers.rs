//! Tests that run once per ledger backend: `on_both_ledgers!(name, …)` makes
//! `sqlite_ledger::name` and `postgres_ledger::name`, and each body asks [`fresh_ledger_url`]
//! for a new ledger of its backend.
#![allow(dead_code)]

use std::path::PathBuf;

use factomat::pay::ledger::{AttemptRow, Ledger, PoolOptions};
use rusqlite::{Connection, OpenFlags};

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
