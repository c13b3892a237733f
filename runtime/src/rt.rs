//! Real-time OS settings for lanes: core pinning, `SCHED_FIFO` priority, `mlockall`.
//!
//! # Contract
//!
//! Every request returns what the OS actually granted, as a [`Grant`]: never a silent failure
//! (a refusal carries the errno name, what it means, and what to do about it) and never a panic
//! or abort when the OS says no. The runtime applies a [`RtRequest`] once per lane at start-up
//! (off the hot path) with [`apply_to_current_thread`], collects the results in [`OsGrants`] and
//! reports them ([`OsGrants::summary_lines`]) so a run on an untuned machine says so clearly.
//!
//! Linux only (through `libc`); on other targets every request is
//! `Refused { reason: "not supported on this OS" }`.
//!
//! All functions here may allocate (reason strings, `/proc` reads): call them at start-up or
//! shutdown, never from the hot path.
//!
//! # Defaults
//!
//! [`RtRequest::default`] asks for nothing (the library default: embedding code and tests
//! decide for themselves). [`RtRequest::realtime`] is what the driving pipeline's default
//! config asks for when frames are released in real time: `SCHED_FIFO` 40 for the lanes (the scheduler 41, the watchdog 42, all
//! below the threaded interrupt handlers of a PREEMPT_RT kernel at 50), lanes pinned with
//! [`RtRequest::auto_pin`] and `mlockall`. Where the OS refuses (no root, no `CAP_SYS_NICE`,
//! a container without RT budget), the run goes on at normal priority and the report says
//! what was refused and why.
//!
//! **Automatic pinning** adapts to the machine: lane `i` of `n` goes to the `i`-th of the
//! last `n` cores this process may run on (its affinity mask at start-up, which honours
//! `taskset` and cgroup cpusets; the last ones because the first cores usually take more
//! interrupts and housekeeping). With fewer allowed cores than lanes nothing is pinned and
//! the report says so: two `SCHED_FIFO` lanes of equal priority on one core would only
//! take turns by blocking. Nor is a thread pinned automatically when its `SCHED_FIFO`
//! request was refused: at normal priority, pinning only keeps the kernel from moving it
//! away from other load (explicit `pin_cores` are applied regardless).
//!
//! **Memory locking** is only attempted where it cannot hurt: `mlockall(MCL_FUTURE)` makes
//! every later allocation count against `RLIMIT_MEMLOCK`, so with a finite limit and
//! without `CAP_IPC_LOCK` a granted lock would turn a later allocation into an abort. The
//! request is then refused up front with the limit and what to do (the arena's own bounded
//! `mlock` is still tried, see `arena`).

use std::fmt;

/// What to ask of the OS for the lanes.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RtRequest {
    /// Lane `i` is pinned to `pin_cores[i % len]` (the watchdog to `pin_cores[lanes % len]`).
    /// `None`: see `auto_pin`.
    pub pin_cores: Option<Vec<usize>>,
    /// When `pin_cores` is `None`: pin the lanes to the last cores this process may run on,
    /// one each, resolved at start-up by [`resolve_pinning`] (see the module docs). `false`
    /// with no `pin_cores`: no pinning.
    pub auto_pin: bool,
    /// `SCHED_FIFO` priority for every lane, `1..=99`. `None`: stay `SCHED_OTHER`.
    pub fifo_priority: Option<i32>,
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` for the whole process.
    pub lock_memory: bool,
}

impl RtRequest {
    /// What the pipeline's default config asks for: `SCHED_FIFO` 40, automatic pinning,
    /// `mlockall` (see the module docs). Refusals are reported, never errors.
    pub fn realtime() -> RtRequest {
        RtRequest {
            pin_cores: None,
            auto_pin: true,
            fifo_priority: Some(40),
            lock_memory: true,
        }
    }

    /// Whether anything at all is asked of the OS.
    pub fn asks_anything(&self) -> bool {
        self.pin_cores.is_some()
            || self.auto_pin
            || self.fifo_priority.is_some()
            || self.lock_memory
    }
}

/// Turns [`RtRequest::auto_pin`] into concrete cores for `lanes` lanes: returns the request
/// with `pin_cores` filled in, or unchanged (`pin_cores` still `None`) together with the
/// reason nothing could be pinned. A request with explicit `pin_cores`, or without
/// `auto_pin`, comes back unchanged with no reason. `allowed` is the set of cores the
/// process may run on (`None`: unknown).
pub fn resolve_pinning(
    req: &RtRequest,
    lanes: usize,
    allowed: Option<&[usize]>,
) -> (RtRequest, Option<String>) {
    let mut out = req.clone();
    if req.pin_cores.is_some() || !req.auto_pin {
        return (out, None);
    }
    let Some(allowed) = allowed.filter(|a| !a.is_empty()) else {
        return (
            out,
            Some(
                "automatic pinning: this process's allowed cores are unknown; set rt.pin_cores"
                    .into(),
            ),
        );
    };
    if allowed.len() < lanes {
        return (
            out,
            Some(format!(
                "automatic pinning: {lanes} lanes but only {} allowed core(s) ({allowed:?}); \
                 lanes left unpinned (use fewer lanes, or set rt.pin_cores)",
                allowed.len()
            )),
        );
    }
    out.pin_cores = Some(allowed[allowed.len() - lanes..].to_vec());
    (out, None)
}

/// The cores the calling thread may run on (`sched_getaffinity`), ascending; `None` if
/// unknown (or not on Linux).
pub fn allowed_cores() -> Option<Vec<usize>> {
    imp::current_affinity()
}

/// Outcome of one request to the OS.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Grant {
    /// Not asked for.
    #[default]
    NotRequested,
    /// Asked for and granted.
    Granted,
    /// Asked for and refused; `reason` is the errno name and text plus what to do.
    Refused {
        /// E.g. `"EPERM: run as root or grant CAP_SYS_NICE / set `ulimit -r`"`.
        reason: String,
    },
}

impl Grant {
    /// `true` unless the request was refused (`NotRequested` counts as fine).
    pub fn is_ok(&self) -> bool {
        !matches!(self, Grant::Refused { .. })
    }

    fn refused(reason: impl Into<String>) -> Self {
        Grant::Refused {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::NotRequested => f.write_str("not requested"),
            Grant::Granted => f.write_str("granted"),
            Grant::Refused { reason } => write!(f, "refused ({reason})"),
        }
    }
}

/// What one thread (lane) got.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadGrant {
    /// Thread label, e.g. `"lane 1"`.
    pub thread: String,
    /// Core the thread was asked to be pinned to (see `pinning` for whether it was).
    pub core: Option<usize>,
    /// Outcome of the pinning request.
    pub pinning: Grant,
    /// `SCHED_FIFO` priority asked for, if any (see `priority` for whether it was granted).
    #[serde(default)]
    pub fifo_priority: Option<i32>,
    /// Outcome of the `SCHED_FIFO` request.
    pub priority: Grant,
}

impl ThreadGrant {
    /// One human line, e.g. `"lane 1: core 1 pinned, SCHED_FIFO 80 refused (EPERM: ...)"`.
    pub fn summary_line(&self) -> String {
        let pin = match (&self.pinning, self.core) {
            (Grant::NotRequested, _) => "not pinned".to_owned(),
            (Grant::Granted, Some(c)) => format!("core {c} pinned"),
            (Grant::Granted, None) => "pinned".to_owned(),
            (Grant::Refused { reason }, Some(c)) => format!("core {c} pinning refused ({reason})"),
            (Grant::Refused { reason }, None) => format!("pinning refused ({reason})"),
        };
        let prio = match self.fifo_priority {
            Some(p) => format!("SCHED_FIFO {p}"),
            None => "SCHED_FIFO".to_owned(),
        };
        let sched = match &self.priority {
            Grant::NotRequested => "SCHED_OTHER".to_owned(),
            Grant::Granted => format!("{prio} granted"),
            Grant::Refused { reason } => format!("{prio} refused ({reason})"),
        };
        format!("{}: {pin}, {sched}", self.thread)
    }
}

/// Everything the OS granted to the runtime, for the run report.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OsGrants {
    /// Outcome of `mlockall` (default: not requested).
    pub memory_lock: Grant,
    /// One entry per lane (and any other runtime thread that applied a request).
    pub threads: Vec<ThreadGrant>,
    /// RT throttling as read from `/proc/sys/kernel/sched_rt_{runtime,period}_us`,
    /// e.g. `"950000/1000000 us"`; `None` if unreadable.
    pub rt_throttling: Option<String>,
}

impl OsGrants {
    /// Human-readable lines: memory lock, RT throttling, then one line per thread.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut lines = Vec::with_capacity(self.threads.len() + 2);
        lines.push(format!("memory lock: {}", self.memory_lock));
        lines.push(match &self.rt_throttling {
            Some(t) => format!("rt throttling: {t}"),
            None => "rt throttling: unknown".to_owned(),
        });
        lines.extend(self.threads.iter().map(ThreadGrant::summary_line));
        lines
    }

    /// Whether every requested thing was granted (things not requested don't count).
    pub fn all_granted(&self) -> bool {
        self.memory_lock.is_ok()
            && self
                .threads
                .iter()
                .all(|t| t.pinning.is_ok() && t.priority.is_ok())
    }
}

/// Applies the per-thread parts of `req` (`SCHED_FIFO`, then pinning) to the calling thread,
/// which is lane `lane_index`, and reports the outcome under the label `thread_name`.
///
/// `req.lock_memory` is process-wide and is *not* applied here: call [`lock_all_memory`] once.
/// An empty `pin_cores` list is refused (there is no core to pin to). Cores that came from
/// [`RtRequest::auto_pin`] (resolved by [`resolve_pinning`]) are only pinned when
/// `SCHED_FIFO` was granted: a normal-priority thread pinned to one core cannot move away
/// from whatever else runs there, which makes it slower, not more predictable.
pub fn apply_to_current_thread(
    thread_name: &str,
    lane_index: usize,
    req: &RtRequest,
) -> ThreadGrant {
    let priority = match req.fifo_priority {
        None => Grant::NotRequested,
        Some(p) => set_current_thread_fifo(p),
    };
    let (core, pinning) = match req.pin_cores.as_deref() {
        None => (None, Grant::NotRequested),
        Some([]) => (
            None,
            Grant::refused("pin_cores is empty: list at least one core or leave it unset"),
        ),
        Some(cores) => {
            let core = cores[lane_index % cores.len()];
            if req.auto_pin && priority != Grant::Granted {
                (
                    Some(core),
                    Grant::refused(
                        "automatic pinning skipped: SCHED_FIFO was not granted, and a \
                         normal-priority thread pinned to one core cannot move away from other \
                         load; set rt.pin_cores to pin anyway",
                    ),
                )
            } else {
                (Some(core), pin_current_thread(core))
            }
        }
    };
    ThreadGrant {
        thread: thread_name.to_owned(),
        core,
        pinning,
        fifo_priority: req.fifo_priority,
        priority,
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::Grant;
    use std::io;

    /// `CPU_SETSIZE` as a `usize` (1024 with glibc and musl).
    const SETSIZE: usize = libc::CPU_SETSIZE as usize;

    fn errno_name(code: i32) -> &'static str {
        match code {
            libc::EPERM => "EPERM",
            libc::EINVAL => "EINVAL",
            libc::ENOMEM => "ENOMEM",
            libc::EAGAIN => "EAGAIN",
            libc::ESRCH => "ESRCH",
            libc::EFAULT => "EFAULT",
            libc::ENOTSUP => "ENOTSUP",
            _ => "errno",
        }
    }

    /// `"NAME (os text): hint"`.
    fn refusal(code: i32, hint: &str) -> Grant {
        let text = io::Error::from_raw_os_error(code).to_string();
        // Drop std's " (os error N)" suffix; the errno name says it already.
        let text = text.split(" (os error").next().unwrap_or(&text);
        Grant::refused(format!("{} ({text}): {hint}", errno_name(code)))
    }

    fn last_errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// Parses a kernel CPU list such as `"0-3,8,10-11"`.
    pub(super) fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                    if b < a || b - a > SETSIZE {
                        return None;
                    }
                    out.extend(a..=b);
                }
                None => out.push(part.trim().parse().ok()?),
            }
        }
        Some(out)
    }

    fn online_cpu_list() -> Option<(String, Vec<usize>)> {
        let s = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
        let list = parse_cpu_list(&s)?;
        Some((s.trim().to_owned(), list))
    }

    pub(super) fn current_affinity() -> Option<Vec<usize>> {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 = calling thread; `set` is a valid, writable cpu_set_t of the size passed.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return None;
        }
        // SAFETY: CPU_ISSET only reads the bit array; every index is < CPU_SETSIZE.
        Some(
            (0..SETSIZE)
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                .collect(),
        )
    }

    pub(super) fn set_affinity(cores: &[usize]) -> Grant {
        if cores.is_empty() {
            return Grant::refused("empty core set: name at least one core");
        }
        if let Some(&bad) = cores.iter().find(|&&c| c >= SETSIZE) {
            return Grant::refused(format!(
                "EINVAL: core {bad} is out of range (CPU_SETSIZE is {SETSIZE}); pick a core below {}",
                super::online_cores()
            ));
        }
        if let Some((text, online)) = online_cpu_list() {
            if let Some(&bad) = cores.iter().find(|c| !online.contains(c)) {
                return Grant::refused(format!(
                    "EINVAL: core {bad} is not online (online cores: {text}); pick an online core"
                ));
            }
        }
        // SAFETY: all-zero is a valid empty cpu_set_t.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cores {
            // SAFETY: c < CPU_SETSIZE was checked above, so the bit is inside `set`.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        // SAFETY: pid 0 = calling thread; `set` is a valid cpu_set_t of the size passed, only read.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if rc == 0 {
            return Grant::Granted;
        }
        let code = last_errno();
        let hint = match code {
            libc::EINVAL => {
                let allowed = std::fs::read_to_string("/proc/self/status")
                    .ok()
                    .and_then(|s| {
                        s.lines()
                            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                            .map(|v| v.trim().to_owned())
                    })
                    .unwrap_or_else(|| "unknown".to_owned());
                format!(
                    "core(s) {cores:?} not in this process's allowed CPU set \
                     (cgroup cpuset / taskset; allowed: {allowed}); pick an allowed core"
                )
            }
            libc::EPERM => "not permitted to change this thread's affinity; run as root or \
                            grant CAP_SYS_NICE"
                .to_owned(),
            _ => "sched_setaffinity failed".to_owned(),
        };
        refusal(code, &hint)
    }

    pub(super) fn set_fifo(priority: i32) -> Grant {
        // SAFETY: sched_get_priority_{min,max} take a policy constant and touch no memory.
        let (min, max) = unsafe {
            (
                libc::sched_get_priority_min(libc::SCHED_FIFO),
                libc::sched_get_priority_max(libc::SCHED_FIFO),
            )
        };
        let (min, max) = if min < 0 || max < 0 {
            (1, 99)
        } else {
            (min, max)
        };
        if !(min..=max).contains(&priority) {
            return Grant::refused(format!(
                "EINVAL: SCHED_FIFO priority {priority} out of range {min}..={max}"
            ));
        }
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // SAFETY: pthread_self() is the calling thread, alive for the call; `param` is a valid
        // sched_param that is only read.
        let rc =
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
        match rc {
            0 => Grant::Granted,
            libc::EPERM => refusal(
                rc,
                "run as root or grant CAP_SYS_NICE / set `ulimit -r` (RLIMIT_RTPRIO); in a \
                 container also allow RT scheduling (e.g. docker --cap-add SYS_NICE \
                 --cpu-rt-runtime)",
            ),
            _ => refusal(rc, "pthread_setschedparam(SCHED_FIFO) failed"),
        }
    }

    #[cfg(test)]
    pub(super) fn set_normal() -> Grant {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pthread_self() is the calling thread, alive for the call; `param` is a valid
        // sched_param that is only read.
        let rc =
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_OTHER, &param) };
        if rc == 0 {
            Grant::Granted
        } else {
            refusal(rc, "pthread_setschedparam(SCHED_OTHER) failed")
        }
    }

    /// Whether the effective capabilities include `CAP_IPC_LOCK` (from /proc/self/status).
    fn has_cap_ipc_lock() -> bool {
        const CAP_IPC_LOCK: u32 = 14;
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
    }

    /// `RLIMIT_MEMLOCK`'s soft limit in bytes; `None` when unlimited (or unreadable).
    fn memlock_limit() -> Option<u64> {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid, writable rlimit; getrlimit writes only into it.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
        if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every target
        Some(lim.rlim_cur as u64)
    }

    pub(super) fn lock_all() -> Grant {
        // MCL_FUTURE makes every later allocation count against RLIMIT_MEMLOCK: with a
        // finite limit and no CAP_IPC_LOCK a granted lock would turn a later allocation
        // into an abort. Refuse up front instead.
        if let Some(refusal) = super::memlock_precheck(memlock_limit(), has_cap_ipc_lock()) {
            return refusal;
        }
        // SAFETY: mlockall takes flags only and touches no caller memory.
        let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
        if rc == 0 {
            return Grant::Granted;
        }
        let code = last_errno();
        let hint = match code {
            libc::ENOMEM => {
                "RLIMIT_MEMLOCK is too small: raise `ulimit -l` (e.g. unlimited) or \
                             run as root / grant CAP_IPC_LOCK"
            }
            libc::EPERM => "run as root or grant CAP_IPC_LOCK (or raise `ulimit -l`)",
            _ => "mlockall failed",
        };
        refusal(code, hint)
    }

    #[cfg(test)]
    pub(super) fn unlock_all() {
        // SAFETY: munlockall takes no arguments and touches no caller memory; failure is harmless.
        unsafe {
            libc::munlockall();
        }
    }

    pub(super) fn online_cores() -> usize {
        // SAFETY: sysconf takes a name constant and touches no caller memory.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
    }

    pub(super) fn rt_throttling() -> Option<String> {
        let read =
            |p: &str| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        let runtime = read("/proc/sys/kernel/sched_rt_runtime_us")?;
        let period = read("/proc/sys/kernel/sched_rt_period_us")?;
        if runtime < 0 {
            Some(format!("{runtime}/{period} us (unthrottled)"))
        } else {
            Some(format!("{runtime}/{period} us"))
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::Grant;

    const UNSUPPORTED: &str = "not supported on this OS";

    pub(super) fn current_affinity() -> Option<Vec<usize>> {
        None
    }
    pub(super) fn set_affinity(_cores: &[usize]) -> Grant {
        Grant::refused(UNSUPPORTED)
    }
    pub(super) fn set_fifo(_priority: i32) -> Grant {
        Grant::refused(UNSUPPORTED)
    }
    #[cfg(test)]
    pub(super) fn set_normal() -> Grant {
        Grant::refused(UNSUPPORTED)
    }
    pub(super) fn lock_all() -> Grant {
        Grant::refused(UNSUPPORTED)
    }
    #[cfg(test)]
    pub(super) fn unlock_all() {}
    pub(super) fn online_cores() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
    pub(super) fn rt_throttling() -> Option<String> {
        None
    }
}

/// `Some(refusal)` when `mlockall(MCL_FUTURE)` must not be attempted: the soft
/// `RLIMIT_MEMLOCK` is finite (`limit`, bytes; `None` = unlimited) and the process lacks
/// `CAP_IPC_LOCK`, so every later allocation would count against the limit.
fn memlock_precheck(limit: Option<u64>, cap_ipc_lock: bool) -> Option<Grant> {
    match limit {
        Some(limit) if !cap_ipc_lock => Some(Grant::refused(format!(
            "not attempted: RLIMIT_MEMLOCK is {} KiB and this process lacks CAP_IPC_LOCK, so \
             locking all future memory would make later allocations fail; run as root, grant \
             CAP_IPC_LOCK, or raise the limit (`ulimit -l unlimited`)",
            limit / 1024
        ))),
        _ => None,
    }
}

/// Pins the calling thread to `core` (`sched_setaffinity(0, ...)`).
///
/// Refused with a reason when `core >= CPU_SETSIZE`, the core is not online, or it is outside
/// the process's allowed CPU set.
pub fn pin_current_thread(core: usize) -> Grant {
    imp::set_affinity(&[core])
}

/// Sets the calling thread's affinity to exactly `cores` (e.g. to restore what
/// [`current_thread_affinity`] returned). Refused like [`pin_current_thread`]. Tests only:
/// the runtime pins with [`pin_current_thread`].
#[cfg(test)]
pub(crate) fn set_current_thread_affinity(cores: &[usize]) -> Grant {
    imp::set_affinity(cores)
}

/// The cores the calling thread may run on (`sched_getaffinity`); `None` if unknown.
/// Tests only (they restore it after pinning).
#[cfg(test)]
pub(crate) fn current_thread_affinity() -> Option<Vec<usize>> {
    allowed_cores()
}

/// Switches the calling thread to `SCHED_FIFO` at `priority`.
///
/// The priority must lie in `sched_get_priority_min/max(SCHED_FIFO)` (`1..=99` on Linux),
/// otherwise the request is refused without asking the kernel.
pub fn set_current_thread_fifo(priority: i32) -> Grant {
    imp::set_fifo(priority)
}

/// Puts the calling thread back on `SCHED_OTHER`. Tests only.
#[cfg(test)]
pub(crate) fn reset_current_thread_to_normal() -> Grant {
    imp::set_normal()
}

/// Locks all current and future pages of the process in RAM (`mlockall(MCL_CURRENT | MCL_FUTURE)`).
///
/// Refused without asking the kernel when `RLIMIT_MEMLOCK` is finite and the process lacks
/// `CAP_IPC_LOCK`: once granted, every later allocation would count against the limit and
/// could fail (see the module docs).
pub fn lock_all_memory() -> Grant {
    imp::lock_all()
}

/// Undoes [`lock_all_memory`] (`munlockall`). Never fails visibly. Tests only.
#[cfg(test)]
pub(crate) fn unlock_all_memory() {
    imp::unlock_all()
}

/// RT throttling setting, e.g. `"950000/1000000 us"` (`"-1/1000000 us (unthrottled)"` when
/// disabled); `None` when the `/proc` files cannot be read (or not on Linux).
pub fn read_rt_throttling() -> Option<String> {
    imp::rt_throttling()
}

/// Number of online cores (at least 1).
pub fn online_cores() -> usize {
    imp::online_cores()
}

/// Sets the calling thread's timer slack to 1 ns (Linux; a no-op elsewhere), so its timed
/// sleeps (`park_timeout`) wake as close to the asked time as the OS can.
pub(crate) fn set_timer_slack_1ns() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value and touches only the calling
    // thread's timer slack; no pointers are involved.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests;
