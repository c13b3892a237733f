//! Helpers shared by the CLI tests. Each `tests/*.rs` file is a crate of its own that
//! includes this module, and not every one uses every helper.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `redline` binary of this build.
pub fn redline() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redline"))
}

/// A fresh, empty temporary directory `redline-{suite}-{pid}-{name}` (emptied if a
/// previous run left it).
pub fn fresh_dir(suite: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("redline-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
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
