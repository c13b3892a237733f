//! Where and how a measurement was taken: the machine ([`MachineInfo`]) and the run
//! setup ([`RunSetup`]), with the checks that make a comparison questionable (another
//! kind of machine, another setup), and the config hash ([`fnv1a_hex`]).
//!
//! Contract: plain data, serialised into every measurement file; [`MachineInfo::detect`]
//! reads a few files under `/proc` (off the hot path, once per measurement).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The machine a measurement was taken on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu: String,
    /// Logical CPUs available to the process.
    pub logical_cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// CPU architecture.
    pub arch: String,
}

impl MachineInfo {
    /// This machine, as far as the OS tells (fields it does not tell are "unknown").
    pub fn detect() -> MachineInfo {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        MachineInfo {
            cpu,
            logical_cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            kernel: read("/proc/sys/kernel/osrelease"),
            hostname: read("/proc/sys/kernel/hostname"),
            arch: std::env::consts::ARCH.into(),
        }
    }

    /// Same kind of machine: CPU model, core count and architecture agree (host names
    /// and kernels may differ between CI runners of one kind).
    pub fn same_kind(&self, other: &MachineInfo) -> bool {
        self.cpu == other.cpu && self.logical_cpus == other.logical_cpus && self.arch == other.arch
    }

    /// One line for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} CPUs, {}, kernel {}, host {})",
            self.cpu, self.logical_cpus, self.arch, self.kernel, self.hostname
        )
    }
}

/// What was replayed, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSetup {
    /// redline version that measured.
    pub redline_version: String,
    /// Hash (FNV-1a 64) of the effective config, `[regress]` table excluded.
    pub config_hash: String,
    /// Release mode.
    pub release: String,
    /// Worker lanes.
    pub lanes: usize,
    /// Frames in flight.
    pub frame_slots: usize,
    /// Network or oracle perception.
    pub perception: String,
    /// Injected slowdowns (`stage: +P% +B ms`), empty in a real measurement.
    pub slowdown: Vec<String>,
    /// The log (or built-in scenario) replayed.
    pub source: String,
    /// Frames per replay, warm-up included.
    pub frames_per_rep: u64,
    /// Warm-up frames per replay (not measured).
    pub warmup_frames: u64,
    /// Deadline after release, ns.
    pub deadline_ns: u64,
    /// Budget per stage, ns.
    pub budgets_ns: BTreeMap<String, u64>,
}

impl RunSetup {
    /// The differences to `other` that make a comparison questionable, in words.
    pub fn differences(&self, other: &RunSetup) -> Vec<String> {
        let mut d = Vec::new();
        let mut check = |what: &str, a: String, b: String| {
            if a != b {
                d.push(format!("{what}: {a} vs {b}"));
            }
        };
        check(
            "config hash",
            self.config_hash.clone(),
            other.config_hash.clone(),
        );
        check("release", self.release.clone(), other.release.clone());
        check("lanes", self.lanes.to_string(), other.lanes.to_string());
        check(
            "frame slots",
            self.frame_slots.to_string(),
            other.frame_slots.to_string(),
        );
        check(
            "perception",
            self.perception.clone(),
            other.perception.clone(),
        );
        check(
            "slowdown",
            self.slowdown.join(", "),
            other.slowdown.join(", "),
        );
        check("source", self.source.clone(), other.source.clone());
        check(
            "frames per replay",
            self.frames_per_rep.to_string(),
            other.frames_per_rep.to_string(),
        );
        d
    }
}

/// FNV-1a 64 of `text`, as 16 hex digits: a stable hash for config identity.
pub fn fnv1a_hex(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_hash_is_stable() {
        assert_eq!(fnv1a_hex(""), "cbf29ce484222325");
        assert_eq!(fnv1a_hex("a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn setup_differences_are_named() {
        let a = RunSetup {
            redline_version: "0.1.0".into(),
            config_hash: fnv1a_hex("a"),
            release: "RealTime".into(),
            lanes: 2,
            frame_slots: 2,
            perception: "Network".into(),
            slowdown: vec![],
            source: "log".into(),
            frames_per_rep: 120,
            warmup_frames: 30,
            deadline_ns: 1,
            budgets_ns: BTreeMap::new(),
        };
        assert!(a.differences(&a.clone()).is_empty());
        let b = RunSetup {
            lanes: 1,
            slowdown: vec!["backbone: +20% +0 ms".into()],
            ..a.clone()
        };
        assert_eq!(
            a.differences(&b),
            ["lanes: 2 vs 1", "slowdown:  vs backbone: +20% +0 ms"]
        );
        let me = MachineInfo::detect();
        assert!(me.same_kind(&me.clone()));
        let other = MachineInfo {
            cpu: "Some Other CPU".into(),
            ..me.clone()
        };
        assert!(!me.same_kind(&other) && other.describe().starts_with("Some Other CPU ("));
    }
}
