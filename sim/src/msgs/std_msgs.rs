//! `builtin_interfaces/Time` and `std_msgs/Header`: the stamp and frame every message carries.
//!
//! Promises: [`Time`] round-trips every `u64` nanosecond stamp below `i32::MAX` seconds; a
//! negative or malformed stamp converts to a [`MsgError`], never a panic. Cost: a header
//! decode allocates its frame string.

use super::MsgError;
use crate::cdr::{CdrError, CdrReader, CdrWriter};

pub(super) const TIME_DEF: (&str, &str) =
    ("builtin_interfaces/Time", "int32 sec\nuint32 nanosec\n");
pub(super) const HEADER_DEF: (&str, &str) = (
    "std_msgs/Header",
    "builtin_interfaces/Time stamp\nstring frame_id\n",
);

/// `builtin_interfaces/Time`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time {
    /// Seconds.
    pub sec: i32,
    /// Nanoseconds, < 1e9.
    pub nanosec: u32,
}

impl Time {
    /// From nanoseconds since the scenario start; saturates at `i32::MAX` seconds (year 2038
    /// relative to the start: never reached by a scenario).
    pub fn from_ns(ns: u64) -> Time {
        let sec = ns / 1_000_000_000;
        Time {
            sec: i32::try_from(sec).unwrap_or(i32::MAX),
            nanosec: (ns % 1_000_000_000) as u32,
        }
    }
    /// To nanoseconds; a negative or malformed time is an error.
    pub fn to_ns(self) -> Result<u64, MsgError> {
        if self.sec < 0 || self.nanosec >= 1_000_000_000 {
            return Err(MsgError::BadStamp {
                sec: self.sec,
                nanosec: self.nanosec,
            });
        }
        Ok(self.sec as u64 * 1_000_000_000 + u64::from(self.nanosec))
    }
    pub(super) fn encode(&self, w: &mut CdrWriter) {
        w.i32(self.sec);
        w.u32(self.nanosec);
    }
    pub(super) fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Time {
            sec: r.i32()?,
            nanosec: r.u32()?,
        })
    }
}

/// `std_msgs/Header`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Acquisition time.
    pub stamp: Time,
    /// Coordinate frame.
    pub frame_id: String,
}

impl Header {
    /// A header at `stamp_ns` in `frame_id`.
    pub fn new(stamp_ns: u64, frame_id: &str) -> Header {
        Header {
            stamp: Time::from_ns(stamp_ns),
            frame_id: frame_id.to_string(),
        }
    }
    /// Appends the header to `w`.
    pub fn encode(&self, w: &mut CdrWriter) {
        self.stamp.encode(w);
        w.string(&self.frame_id);
    }
    /// Reads a header.
    pub fn decode(r: &mut CdrReader<'_>) -> Result<Self, CdrError> {
        Ok(Header {
            stamp: Time::decode(r)?,
            frame_id: r.string()?.to_string(),
        })
    }
}
