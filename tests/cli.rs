//! The `factomat` binary: help, fail-fast configuration, the drift check, and `serve` on
//! embedded defaults answering over HTTP and stopping cleanly on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{repo_root, temp_path};

fn factomat() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_factomat"));
    command.current_dir(repo_root());
    for (name, _) in std::env::vars() {
        if name.starts_with("FACTOMAT_") {
            command.env_remove(name);
        }
    }
    command
}

/// `factomat serve` in `dir` on a free loopback port, logging in `log_format` to a pipe.
fn serve_logging_to_a_pipe(dir: &Path, log_format: &str) -> Child {
    factomat()
        .arg("serve")
        .current_dir(dir)
        .env("FACTOMAT_LISTEN", "127.0.0.1:0")
        .env("FACTOMAT_LOG_FORMAT", log_format)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns")
}

/// The first line of the child's log that says it is listening (within 20 s). The pipe is
/// closed then, as when a log reader goes away: the server must not mind.
fn listening_line(child: &mut Child) -> String {
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no listening line");
        let line = lines.next().expect("a log line").expect("utf-8");
        if line.contains("factomat listening") {
            return line;
        }
    }
}

/// The JSON listening line (see [`listening_line`]) and the address it names.
fn json_listening_line(child: &mut Child) -> (serde_json::Value, String) {
    let line = listening_line(child);
    let entry: serde_json::Value = serde_json::from_str(&line).expect("json log line");
    let addr = entry["fields"]["addr"].as_str().expect("addr").to_string();
    (entry, addr)
}

/// Sends SIGTERM and waits for the exit.
fn stop(mut child: Child) -> ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    child.wait().expect("exits")
}

#[test]
fn help_lists_the_commands() {
    let output = factomat().arg("--help").output().expect("runs");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    for command in ["serve", "generate", "ledger", "discovery"] {
        assert!(text.contains(command), "{text}");
    }
}

#[test]
fn a_bad_configuration_value_stops_start_up_with_its_name() {
    let output = factomat()
        .arg("serve")
        .env("FACTOMAT_LISTEN", "nowhere")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("listen") && stderr.contains("FACTOMAT_LISTEN"),
        "{stderr}"
    );

    let config = temp_path("bad.toml");
    std::fs::write(&config, "pay_to = \"0xnot-an-address\"\n").expect("write");
    let output = factomat()
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("pay_to"));
}

#[test]
fn the_committed_renders_pass_the_binary_drift_check() {
    let output = factomat()
        .args(["generate", "--check"])
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[tokio::test]
async fn serve_runs_on_defaults_and_stops_on_sigterm() {
    let dir = temp_path("serve");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut child = serve_logging_to_a_pipe(&dir, "json");
    let (entry, addr) = json_listening_line(&mut child);
    assert_eq!(entry["fields"]["message"], "factomat listening");
    let health: serde_json::Value = reqwest::get(format!("http://{addr}/health"))
        .await
        .expect("answered")
        .json()
        .await
        .expect("health JSON");
    assert_eq!(health["service"], "factomat");
    let exit = stop(child);
    assert!(exit.success(), "graceful exit on SIGTERM: {exit:?}");
    assert!(
        !dir.join("factomat.db").exists(),
        "no ledger is opened without a facilitator"
    );
}

/// A file, a pipe or journald gets plain text: colour codes only on a terminal.
#[test]
fn text_logs_on_a_pipe_carry_no_colour_codes() {
    let dir = temp_path("text-logs");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut child = serve_logging_to_a_pipe(&dir, "text");
    let listening = listening_line(&mut child);
    assert!(stop(child).success());
    assert!(!listening.contains('\u{1b}'), "{listening:?}");
    assert!(
        listening.contains(" INFO ") && listening.contains("addr=127.0.0.1:"),
        "{listening:?}"
    );
}

/// A log reader that goes away (the pipe closed) costs the log lines, not the server: it
/// still answers and stops cleanly, writing its shutdown lines into the closed pipe.
#[tokio::test]
async fn a_closed_log_pipe_does_not_stop_the_server() {
    let dir = temp_path("closed-log");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut child = serve_logging_to_a_pipe(&dir, "json");
    let (_, addr) = json_listening_line(&mut child);
    let health = reqwest::get(format!("http://{addr}/health"))
        .await
        .expect("answered after its log pipe closed");
    assert_eq!(health.status().as_u16(), 200);
    let exit = stop(child);
    assert!(
        exit.success(),
        "graceful exit with a closed log pipe: {exit:?}"
    );
}
