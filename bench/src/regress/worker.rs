//! Repetitions in worker processes: `BINARY regress-worker [LOG] --config FILE --label
//! LABEL --out FILE [--frames N]` runs one measured replay and writes its
//! [`Measurement`]. A/B mode runs both builds this way, this build included, so both sides
//! pay the same process start-up and see the same cache state, in [`alternate`]'s order.
//!
//! Contract: a binary that does not answer `regress-worker --protocol` with
//! [`WORKER_PROTOCOL`] is refused before anything runs; a worker that fails is reported
//! with its exit status and the tail of its stderr; its output file is checked as any
//! measurement file. Spawns processes and reads files: never on the hot path.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ab::{alternate, Side};
use super::measurement::{Measurement, MeasurementError};

/// What `regress-worker --protocol` prints: the version of the worker interface.
pub const WORKER_PROTOCOL: &str = "redline-regress-worker/1";

/// A worker process could not give a measurement.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// It could not be started.
    #[error("cannot run {binary}: {cause}. Give the path of a built redline binary, e.g. target/release/redline of the other checkout")]
    Spawn {
        /// Binary.
        binary: PathBuf,
        /// Cause.
        cause: std::io::Error,
    },
    /// It does not speak the worker protocol.
    #[error("{binary} is not a redline build with `regress` support (`regress-worker --protocol` answered {answer:?}, expected {WORKER_PROTOCOL:?}): build the reference from a checkout that has `redline regress`")]
    Protocol {
        /// Binary.
        binary: PathBuf,
        /// What it printed.
        answer: String,
    },
    /// It ran and failed.
    #[error("{binary} failed ({status}) replaying for A/B mode; its last output:\n{stderr}")]
    Failed {
        /// Binary.
        binary: PathBuf,
        /// Exit status.
        status: String,
        /// Tail of its stderr.
        stderr: String,
    },
    /// Its output file was unusable.
    #[error(transparent)]
    Output(#[from] MeasurementError),
}

/// One side of an A/B comparison.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// The redline binary.
    pub binary: PathBuf,
    /// The config file it replays with.
    pub config: PathBuf,
    /// "reference" or "candidate".
    pub label: String,
}

/// Checks that `binary` is a redline build with the worker protocol.
pub fn check_worker(binary: &Path) -> Result<(), WorkerError> {
    let out = Command::new(binary)
        .args(["regress-worker", "--protocol"])
        .output()
        .map_err(|cause| WorkerError::Spawn {
            binary: binary.to_path_buf(),
            cause,
        })?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || answer != WORKER_PROTOCOL {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(WorkerError::Protocol {
            binary: binary.to_path_buf(),
            answer: if answer.is_empty() {
                stderr.lines().next().unwrap_or("").to_string()
            } else {
                answer
            },
        });
    }
    Ok(())
}

/// Runs one replay in a worker process and reads its measurement from `out`.
pub fn run_worker(
    spec: &WorkerSpec,
    log: Option<&Path>,
    frames: Option<u64>,
    out: &Path,
) -> Result<Measurement, WorkerError> {
    let mut cmd = Command::new(&spec.binary);
    cmd.arg("regress-worker");
    if let Some(l) = log {
        cmd.arg(l);
    }
    cmd.arg("--config")
        .arg(&spec.config)
        .arg("--label")
        .arg(&spec.label)
        .arg("--out")
        .arg(out);
    if let Some(f) = frames {
        cmd.arg("--frames").arg(f.to_string());
    }
    let _ = std::fs::remove_file(out);
    let o = cmd.output().map_err(|cause| WorkerError::Spawn {
        binary: spec.binary.clone(),
        cause,
    })?;
    if !o.status.success() {
        let stderr = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        return Err(WorkerError::Failed {
            binary: spec.binary.clone(),
            status: o.status.to_string(),
            stderr: lines[lines.len().saturating_sub(10)..].join("\n"),
        });
    }
    Ok(Measurement::load(out)?)
}

/// A/B: `reps` pairs, alternating which side runs first; `on_pair(i, reference,
/// candidate)` after each pair. Worker files go to `work_dir`.
pub fn run_ab(
    reference: &WorkerSpec,
    candidate: &WorkerSpec,
    log: Option<&Path>,
    frames: Option<u64>,
    reps: usize,
    work_dir: &Path,
    on_pair: &mut dyn FnMut(usize, &Measurement, &Measurement),
) -> Result<(Vec<Measurement>, Vec<Measurement>), WorkerError> {
    check_worker(&reference.binary)?;
    check_worker(&candidate.binary)?;
    std::fs::create_dir_all(work_dir).map_err(|e| {
        WorkerError::Output(MeasurementError::Write {
            path: work_dir.to_path_buf(),
            cause: e,
        })
    })?;
    alternate(
        reps,
        |side, i| {
            let s = match side {
                Side::Reference => reference,
                Side::Candidate => candidate,
            };
            run_worker(
                s,
                log,
                frames,
                &work_dir.join(format!("{}-{i}.json", s.label)),
            )
        },
        on_pair,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_without_the_worker_protocol_are_refused() {
        let e = check_worker(Path::new("/nonexistent/redline")).unwrap_err();
        assert!(matches!(e, WorkerError::Spawn { .. }), "{e}");
        assert!(e
            .to_string()
            .contains("Give the path of a built redline binary"));
        let e = check_worker(Path::new("/bin/sh")).unwrap_err();
        assert!(matches!(e, WorkerError::Protocol { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("is not a redline build with `regress` support"),
            "{e}"
        );
    }
}
