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

/// `o` when it exited 0; else panics with its exit code, stdout and stderr.
pub fn check(o: Output) -> Output {
    assert!(o.status.success(), "{}", show(&o));
    o
}

/// The `output hash` a replay printed on `stdout`.
pub fn output_hash(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("output hash "))
        .unwrap_or_else(|| panic!("no output hash in\n{stdout}"))
        .to_string()
}

/// Writes a bag with the reference Python stack (`tests/python/write_foreign_bag.py DIR
/// ARGS`: Autoware-style topics, 2 cameras) into a fresh `dir`, and beside it
/// `seeded.toml`, its `[sensors]` config with the untrained network (any rig size). False,
/// after a loud skip line naming `suite`, when python3 or its packages are missing.
pub fn write_foreign_bag(suite: &str, dir: &Path, args: &[&str]) -> bool {
    let _ = std::fs::remove_dir_all(dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/write_foreign_bag.py");
    let out = match Command::new("python3")
        .arg(&script)
        .arg(dir)
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("\n==== SKIPPED: {suite}: cannot run python3 ({e}) ====\n");
            return false;
        }
    };
    if out.status.code() == Some(3) {
        eprintln!(
            "\n==== SKIPPED: {suite}: {} ====\n",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return false;
    }
    check(out);
    let config = std::fs::read_to_string(dir.join("redline.toml")).unwrap();
    std::fs::write(
        dir.join("seeded.toml"),
        format!("network = \"seeded\"\n{config}"),
    )
    .unwrap();
    true
}
