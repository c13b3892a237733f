//! Helpers shared by the CLI tests. Each `tests/*.rs` file is a crate of its own that
//! includes this module, and not every one uses every helper.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `redline` binary of this build.
pub fn redline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redline"))
}

/// A fresh, empty temporary directory `redline-{suite}-{name}-XXXXXX`, removed with its
/// files when the returned value is dropped.
pub fn fresh_dir(suite: &str, name: &str) -> Dir {
    Dir(tempfile::Builder::new()
        .prefix(&format!("redline-{suite}-{name}-"))
        .tempdir()
        .unwrap())
}

/// See [`fresh_dir`]; derefs to its path.
pub struct Dir(tempfile::TempDir);

impl std::ops::Deref for Dir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Dir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// `o`'s exit code, stdout and stderr, for assertion messages.
pub fn show(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
