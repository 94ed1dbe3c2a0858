//! A factomat replica as its own process (the built binary), for signal and crash tests.
#![allow(dead_code)]

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `factomat serve` process.
pub struct Replica {
    pub child: Child,
    pub url: String,
    log: std::path::PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// `factomat serve` on `port` with only these variables (beside PATH, the listen address and
/// the shared delivery key), its stderr written to `log`.
fn serve(env: &[(&str, &str)], port: u16, log: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_factomat"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("FACTOMAT_LISTEN", format!("127.0.0.1:{port}"))
        .env("FACTOMAT_DELIVERY_KEY_FILE", super::delivery_key_file())
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("factomat starts")
}

/// Runs `factomat serve` with these variables when start-up is expected to fail: its exit
/// status and what it logged (it must exit within 30 s).
pub async fn failed_start(env: &[(&str, &str)]) -> (ExitStatus, String) {
    let log = super::temp_path("failed-start.log");
    let mut child = serve(env, free_port(), &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "factomat kept running: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

impl Replica {
    /// Starts the binary with these `FACTOMAT_*` variables and waits until /health answers.
    pub async fn spawn(env: &[(&str, &str)]) -> Replica {
        let port = free_port();
        let log = super::temp_path("replica.log");
        let child = serve(env, port, &log);
        let replica = Replica {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log: log.clone(),
        };
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if client
                .get(format!("{}/health", replica.url))
                .send()
                .await
                .is_ok()
            {
                return replica;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the replica did not answer /health: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// What the process logged (stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal (by the child's own pid) to this process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the process to end, at most `limit`.
    pub async fn exit_status(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the replica did not exit");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
