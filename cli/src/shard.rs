//! `--shard`: which of a list of logs this process replays, so that a fleet of machines
//! (a Kubernetes Indexed Job, a Slurm array, Bazel test sharding, or plain `--shard i/N`)
//! splits the list and `redline report merge` adds their measurement files.
//!
//! Contract: shard `i` of `N` takes the logs at positions `j` with `j mod N == i`, in the
//! order given, so the shards partition the list (every log in exactly one shard) as long as
//! every process is given the same list in the same order. `--shard auto` reads the index
//! and count from the environment:
//!
//! | scheduler | index | count |
//! |---|---|---|
//! | Bazel (`shard_count`) | `TEST_SHARD_INDEX` | `TEST_TOTAL_SHARDS` (and `TEST_SHARD_STATUS_FILE` is touched, as Bazel asks) |
//! | Slurm array (`--array=0-9`) | `SLURM_ARRAY_TASK_ID` − `SLURM_ARRAY_TASK_MIN` | `SLURM_ARRAY_TASK_COUNT` |
//! | Kubernetes Indexed Job | `JOB_COMPLETION_INDEX` | `REDLINE_SHARD_COUNT` (set it to the Job's `completions`: Kubernetes does not export it) |

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// One shard of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based index.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Shard {
    /// Parses `i/N` or `auto` (see the module docs); `env` reads a variable.
    pub fn parse(arg: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard> {
        let shard = if arg == "auto" {
            from_env(env)?
        } else {
            let (i, n) = arg.split_once('/').with_context(|| {
                format!("--shard {arg}: write it as INDEX/COUNT (e.g. 0/4) or `auto`")
            })?;
            Shard {
                index: i
                    .trim()
                    .parse()
                    .with_context(|| format!("--shard {arg}: {i:?} is not an index"))?,
                count: n
                    .trim()
                    .parse()
                    .with_context(|| format!("--shard {arg}: {n:?} is not a count"))?,
            }
        };
        if shard.count == 0 || shard.index >= shard.count {
            bail!(
                "shard {}/{}: the index must be below the count (0-based: 0/{} .. {}/{})",
                shard.index,
                shard.count,
                shard.count.max(1),
                shard.count.max(1) - 1,
                shard.count.max(1)
            );
        }
        Ok(shard)
    }

    /// The items of this shard, in order.
    pub fn select<T: Clone>(&self, items: &[T]) -> Vec<T> {
        items
            .iter()
            .enumerate()
            .filter(|(j, _)| j % self.count == self.index)
            .map(|(_, t)| t.clone())
            .collect()
    }
}

/// `--shard SPEC` applied to `logs` (the environment read for `auto`): this shard's logs
/// and the name of its report directory (`shard-INDEX-of-COUNT`), or None, said on stderr,
/// when no log falls to this shard (nothing to do: not an error, a fleet may have more
/// shards than logs).
pub fn take(spec: &str, logs: &[PathBuf]) -> Result<Option<(Vec<PathBuf>, String)>> {
    let shard = Shard::parse(spec, &|k| std::env::var(k).ok())?;
    let mine = shard.select(logs);
    if mine.is_empty() {
        eprintln!(
            "shard {}/{}: none of the {} logs falls to this shard; nothing to do",
            shard.index,
            shard.count,
            logs.len()
        );
        return Ok(None);
    }
    eprintln!(
        "shard {}/{}: {} of {} logs",
        shard.index,
        shard.count,
        mine.len(),
        logs.len()
    );
    Ok(Some((
        mine,
        format!("shard-{}-of-{}", shard.index, shard.count),
    )))
}

fn num(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<usize>> {
    match env(var) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .with_context(|| format!("environment variable {var}={v:?} is not a number")),
    }
}

fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Shard> {
    if let (Some(index), Some(count)) = (
        num(env, "TEST_SHARD_INDEX")?,
        num(env, "TEST_TOTAL_SHARDS")?,
    ) {
        // Bazel's protocol: touching the status file says the test runner shards.
        if let Some(f) = env("TEST_SHARD_STATUS_FILE") {
            std::fs::write(&f, b"")
                .with_context(|| format!("touching TEST_SHARD_STATUS_FILE {f}"))?;
        }
        return Ok(Shard { index, count });
    }
    if let (Some(id), Some(count)) = (
        num(env, "SLURM_ARRAY_TASK_ID")?,
        num(env, "SLURM_ARRAY_TASK_COUNT")?,
    ) {
        let min = num(env, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let index = id.checked_sub(min).with_context(|| {
            format!("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")
        })?;
        return Ok(Shard { index, count });
    }
    if let Some(index) = num(env, "JOB_COMPLETION_INDEX")? {
        let Some(count) = num(env, "REDLINE_SHARD_COUNT")? else {
            bail!("JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but REDLINE_SHARD_COUNT is not: set it to the Job's completions in the pod's env");
        };
        return Ok(Shard { index, count });
    }
    bail!("--shard auto: no shard in the environment (Bazel TEST_SHARD_INDEX/TEST_TOTAL_SHARDS, Slurm SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, Kubernetes JOB_COMPLETION_INDEX with REDLINE_SHARD_COUNT); give --shard INDEX/COUNT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shards_partition_the_list_in_order() {
        let logs: Vec<u32> = (0..11).collect();
        for n in 1..=13 {
            let mut all: Vec<u32> = Vec::new();
            for i in 0..n {
                let s = Shard::parse(&format!("{i}/{n}"), &env(&[])).unwrap();
                let part = s.select(&logs);
                assert!(part.windows(2).all(|w| w[0] < w[1]), "in order");
                all.extend(part);
            }
            all.sort_unstable();
            assert_eq!(all, logs, "{n} shards: every log exactly once");
        }
    }

    #[test]
    fn the_environment_of_each_scheduler_is_read() {
        let bazel = env(&[("TEST_SHARD_INDEX", "2"), ("TEST_TOTAL_SHARDS", "5")]);
        assert_eq!(
            Shard::parse("auto", &bazel).unwrap(),
            Shard { index: 2, count: 5 }
        );
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "11"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(
            Shard::parse("auto", &slurm).unwrap(),
            Shard { index: 1, count: 4 }
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3"), ("REDLINE_SHARD_COUNT", "8")]);
        assert_eq!(
            Shard::parse("auto", &k8s).unwrap(),
            Shard { index: 3, count: 8 }
        );
        let e = Shard::parse("auto", &env(&[("JOB_COMPLETION_INDEX", "3")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("REDLINE_SHARD_COUNT"), "{e}");
        let e = Shard::parse("auto", &env(&[])).unwrap_err().to_string();
        assert!(e.contains("--shard INDEX/COUNT"), "{e}");
    }

    #[test]
    fn bad_shards_are_named() {
        for (arg, says) in [
            ("4/4", "below the count"),
            ("1/0", "below the count"),
            ("x/2", "not an index"),
            ("3", "INDEX/COUNT"),
        ] {
            let e = Shard::parse(arg, &env(&[])).unwrap_err().to_string();
            assert!(e.contains(says), "{arg}: {e}");
        }
    }
}
