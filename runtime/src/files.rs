//! Files a command writes for its user: whole or not at all, with the mode they need
//! (a kubeconfig holding a token is the user's alone).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The temporary file beside `path` that [`write_atomic`] renames over it.
fn temporary(path: &Path) -> anyhow::Result<PathBuf> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    Ok(path.with_file_name(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Writes `content` to `path` whole or not at all: a temporary file beside it, made
/// with `mode` (so `0o600` is never readable by others, not even for a moment), is
/// renamed over it. The file has `mode` whatever one was there before.
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> anyhow::Result<()> {
    let tmp = temporary(path)?;
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(content)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

/// Whether [`write_atomic`] could write `path` (its directory exists and may be
/// written): asked before a command changes anything the file is to report.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    let tmp = temporary(path)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn written_whole_with_its_mode_and_nothing_left_beside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.kubeconfig");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        check_writable(&path).unwrap();
        write_atomic(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left");
        // a directory that does not exist: said, before and at the write
        let nowhere = dir.path().join("missing").join("agent.kubeconfig");
        let e = check_writable(&nowhere).unwrap_err().to_string();
        assert!(e.contains("cannot write") && e.contains("missing"), "{e}");
        assert!(write_atomic(&nowhere, b"x", 0o600).is_err());
    }
}
