//! Files that hold secrets: written once, readable by their owner only.

use std::io::Write as _;
use std::path::Path;

/// Creates `path` with `bytes`, mode 0600 on Unix, synced to disk. An existing file is never
/// overwritten (`AlreadyExists`).
pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
