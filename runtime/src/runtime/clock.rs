//! The clocks: [`Clock`], the monotonic real clock every runtime thread reads, and
//! [`FrameClock`], which says when frame `k` is released.
//!
//! ## Contract
//!
//! - [`Clock::now_ns`] is monotonic: nanoseconds since the runtime started (its epoch), read
//!   from `Instant`. It costs one clock read, allocates nothing and never blocks; lanes, the
//!   watchdog and the scheduler all use the same clock, so their times compare directly.
//! - [`FrameClock`] gives release times at **absolute** times: in real time frame `k` of a
//!   run is due at `t0 + (k - first) * period`, computed from the run's start, never by
//!   sleeping one period after the previous release, so lateness never accumulates. In
//!   lockstep the clock is virtual: frame `k` is released at `k * period` whatever the real
//!   time, which makes deadlines (and the ladder) reproducible. Data-triggered release
//!   ([`ReleaseMode::AsFastAsPossible`]) has no frame clock: a frame is released at the real
//!   time a slot frees up.
//! - Neither clock ever sleeps; waiting for a due time is the scheduler loop's job.

use std::time::Instant;

use super::config::ReleaseMode;

/// The first frame of a real-time run is due this long after `run` starts, so that the
/// scheduler is parked and the lanes idle when it is released.
const FIRST_RELEASE_DELAY_NS: u64 = 200_000;

/// The monotonic real clock: nanoseconds since the runtime's epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock whose epoch is now.
    pub(crate) fn start() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the epoch (monotonic).
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// When frames are released, on the frame's own time line.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FrameClock {
    /// Time-triggered at absolute real times, one period apart from the run's start.
    Real {
        /// Frame period, ns.
        period_ns: u64,
        /// Real time at which the run's first frame is due.
        t0_ns: u64,
        /// The run's first frame number.
        first_frame: u64,
    },
    /// Virtual time: frame `k` is released at `k * period`.
    Virtual {
        /// Frame period, ns.
        period_ns: u64,
    },
    /// Data-triggered on the real clock: no due times.
    Free,
}

impl FrameClock {
    /// The frame clock of `mode` (a real-time clock starts at 0 until [`Self::start_run`]).
    pub(crate) fn new(mode: ReleaseMode, period_ns: u64) -> FrameClock {
        match mode {
            ReleaseMode::RealTime => FrameClock::Real {
                period_ns,
                t0_ns: 0,
                first_frame: 0,
            },
            ReleaseMode::Lockstep => FrameClock::Virtual { period_ns },
            ReleaseMode::AsFastAsPossible => FrameClock::Free,
        }
    }

    /// Starts a run at real time `now_ns` whose first frame is `first_frame`: a real-time
    /// clock's first release is due shortly after now.
    pub(crate) fn start_run(&mut self, now_ns: u64, first_frame: u64) {
        if let FrameClock::Real {
            t0_ns,
            first_frame: first,
            ..
        } = self
        {
            *t0_ns = now_ns + FIRST_RELEASE_DELAY_NS;
            *first = first_frame;
        }
    }

    /// Release time of `frame`: absolute real time (real-time), virtual time (lockstep),
    /// `None` for data-triggered release (the frame is released at the current real time).
    #[inline]
    pub(crate) fn release_ns(&self, frame: u64) -> Option<u64> {
        match *self {
            FrameClock::Real {
                period_ns,
                t0_ns,
                first_frame,
            } => Some(t0_ns + (frame - first_frame) * period_ns),
            FrameClock::Virtual { period_ns } => Some(frame * period_ns),
            FrameClock::Free => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_clock_is_monotonic() {
        let c = Clock::start();
        let a = c.now_ns();
        let b = c.now_ns();
        assert!(b >= a);
    }

    #[test]
    fn real_time_releases_are_absolute_from_the_run_start() {
        let mut f = FrameClock::new(ReleaseMode::RealTime, 1_000);
        f.start_run(5_000, 10);
        assert_eq!(f.release_ns(10), Some(5_000 + FIRST_RELEASE_DELAY_NS));
        assert_eq!(
            f.release_ns(13),
            Some(5_000 + FIRST_RELEASE_DELAY_NS + 3_000)
        );
        // A later run restarts the time line at its own first frame.
        f.start_run(90_000, 20);
        assert_eq!(
            f.release_ns(21),
            Some(90_000 + FIRST_RELEASE_DELAY_NS + 1_000)
        );
    }

    #[test]
    fn lockstep_is_virtual_one_period_per_frame() {
        let mut f = FrameClock::new(ReleaseMode::Lockstep, 33_333_333);
        f.start_run(123_456, 7);
        assert_eq!(f.release_ns(0), Some(0));
        assert_eq!(f.release_ns(7), Some(7 * 33_333_333));
    }

    #[test]
    fn data_triggered_has_no_due_time() {
        let f = FrameClock::new(ReleaseMode::AsFastAsPossible, 1_000);
        assert_eq!(f.release_ns(3), None);
    }
}
