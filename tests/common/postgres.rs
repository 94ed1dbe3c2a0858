//! PostgreSQL for the tests: `FACTOMAT_TEST_DATABASE_URL` when set, otherwise a throwaway
//! cluster that `scripts/test-postgres` starts on a free loopback port and stops when this
//! test process exits. Each test gets a database of its own.
#![allow(dead_code)]

use std::process::Command;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::repo_root;

/// A cluster started for this process: its admin URL and folder.
pub struct Cluster {
    pub url: String,
    pub dir: String,
}

/// Starts a cluster of its own (stopped when this process exits).
pub fn start_cluster() -> Cluster {
    start_cluster_with(&[])
}

/// Starts a cluster that accepts TCP connections only over TLS, presenting this PEM
/// certificate and key (stopped when this process exits).
pub fn start_tls_cluster(cert_pem: &str, key_pem: &str) -> Cluster {
    let (cert, key) = (
        super::temp_path("server.crt"),
        super::temp_path("server.key"),
    );
    std::fs::write(&cert, cert_pem).expect("certificate written");
    std::fs::write(&key, key_pem).expect("key written");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    start_cluster_with(&["--tls", &cert, &key])
}

fn start_cluster_with(options: &[&str]) -> Cluster {
    let output = Command::new(repo_root().join("scripts/test-postgres"))
        .args(["start", "--watch-pid", &std::process::id().to_string()])
        .args(options)
        .output()
        .expect("scripts/test-postgres runs");
    assert!(
        output.status.success(),
        "scripts/test-postgres start failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let (url, dir) = stdout.trim().rsplit_once(' ').expect("URL and folder");
    Cluster {
        url: url.to_string(),
        dir: dir.to_string(),
    }
}

impl Cluster {
    /// Stops the server, keeping its data: a database outage.
    pub fn halt(&self) {
        self.control("halt");
    }

    /// Starts it again on the same port.
    pub fn resume(&self) {
        self.control("resume");
    }

    fn control(&self, command: &str) {
        let status = Command::new(repo_root().join("scripts/test-postgres"))
            .args([command, &self.dir])
            .status()
            .expect("scripts/test-postgres runs");
        assert!(status.success(), "scripts/test-postgres {command} failed");
    }
}

static ADMIN_URL: LazyLock<String> =
    LazyLock::new(|| match std::env::var("FACTOMAT_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => start_cluster().url,
    });

/// A fresh, empty database on the test server (or on `admin_url`'s).
pub fn fresh_database_on(admin_url: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "factomat_t{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let output = Command::new("psql")
        .args([admin_url, "-v", "ON_ERROR_STOP=1", "-qc"])
        .arg(format!("CREATE DATABASE {name}"))
        .output()
        .expect("psql runs");
    assert!(
        output.status.success(),
        "CREATE DATABASE failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut url = url::Url::parse(admin_url).expect("admin URL");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// A fresh database on the shared test server.
pub fn fresh_database() -> String {
    fresh_database_on(&ADMIN_URL)
}

/// Runs SQL with psql and returns its unaligned output.
pub fn psql(url: &str, sql: &str) -> String {
    let output = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        .output()
        .expect("psql runs");
    assert!(
        output.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
