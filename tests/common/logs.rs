//! Captures everything the in-process server logs in this test binary, at every level, so
//! tests can assert that no secret reaches a log line.

use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};

static LOGS: LazyLock<Arc<Mutex<Vec<u8>>>> = LazyLock::new(|| {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let writer = buffer.clone();
    let _ = tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_writer(move || LogWriter(writer.clone()))
        .try_init();
    buffer
});

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber (once per test binary); call before starting a server.
pub fn capture() {
    LazyLock::force(&LOGS);
}

/// Everything logged so far.
pub fn logs() -> String {
    String::from_utf8_lossy(&LOGS.lock().expect("logs").clone()).into_owned()
}
