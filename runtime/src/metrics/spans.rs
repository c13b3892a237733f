//! Preallocated span ring and Chrome trace-event export (see the module docs of
//! [`crate::metrics`]).

use std::collections::BTreeSet;
use std::io::{self, Write};

/// What a [`Span`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SpanKind {
    /// A stage's `run`.
    Run,
    /// A stage's `fallback` (skipped or late).
    Fallback,
    /// A stage skipped by the current mode (usually a zero-length span).
    Skipped,
    /// The whole frame published its fallback output.
    FrameFallback,
    /// The frame's output was published.
    Publish,
}

impl SpanKind {
    /// Lower-case name, used as the trace-event category.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Run => "run",
            SpanKind::Fallback => "fallback",
            SpanKind::Skipped => "skipped",
            SpanKind::FrameFallback => "frame_fallback",
            SpanKind::Publish => "publish",
        }
    }
}

/// One timed piece of work on a timeline. Times in ns since the runtime's epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Stage index (into the plan's stage list / `stage_names`).
    pub stage: u16,
    /// Frame sequence number.
    pub frame: u64,
    /// Lane (worker) index; `u16::MAX` is the scheduler.
    pub lane: u16,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// End, ns since the epoch (an end before the start exports as duration 0).
    pub end_ns: u64,
    /// What the span stands for.
    pub kind: SpanKind,
}

/// Fixed-capacity ring of [`Span`]s.
///
/// Storage is allocated once in [`new`](Self::new); [`push`](Self::push) overwrites the oldest
/// span when full and never allocates.
#[derive(Debug)]
pub struct SpanRing {
    /// Grows (within its preallocated capacity) until `cap` spans, then is overwritten in place.
    buf: Vec<Span>,
    cap: usize,
    /// Index of the oldest span once the ring is full; 0 before.
    head: usize,
    overwritten: u64,
}

impl SpanRing {
    /// Creates a ring holding up to `capacity` spans, allocating its storage now.
    /// With capacity 0, [`push`](Self::push) is a no-op.
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
            cap: capacity,
            head: 0,
            overwritten: 0,
        }
    }

    /// Appends a span, overwriting the oldest one when full. Hot path: never allocates.
    ///
    /// With capacity 0 the span is dropped (and not counted as overwritten).
    #[inline]
    pub fn push(&mut self, span: Span) {
        if self.buf.len() < self.cap {
            // Within the capacity reserved in `new`: no reallocation.
            self.buf.push(span);
        } else if let Some(slot) = self.buf.get_mut(self.head) {
            *slot = span;
            self.head += 1;
            if self.head == self.cap {
                self.head = 0;
            }
            self.overwritten = self.overwritten.saturating_add(1);
        }
    }

    /// Number of spans held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the ring holds no span.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Maximum number of spans held.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Spans lost to wrap-around since creation or the last [`clear`](Self::clear).
    pub fn overwritten(&self) -> u64 {
        self.overwritten
    }

    /// Spans held, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Span> + '_ {
        let (newer, older) = self.buf.split_at(self.head);
        older.iter().chain(newer.iter())
    }

    /// Removes every span and resets the overwritten count; keeps the storage.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.head = 0;
        self.overwritten = 0;
    }
}

/// Writes `ns` as microseconds with exactly three decimals (ns precision, no float rounding).
fn write_us(w: &mut impl Write, ns: u64) -> io::Result<()> {
    write!(w, "{}.{:03}", ns / 1000, ns % 1000)
}

fn write_json_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    serde_json::to_writer(&mut *w, s).map_err(io::Error::from)
}

/// Writes Chrome trace-event JSON (object form `{"traceEvents": [...], "displayTimeUnit": "ns"}`)
/// that Perfetto UI and `chrome://tracing` open.
///
/// One complete event (`"ph":"X"`) per span, oldest first: `name` is `stage_names[stage]`
/// (`"publish"` / `"frame fallback"` for those kinds, `"stage#N"` for an unknown index), `cat` is
/// the kind in lower case ([`SpanKind::as_str`]), `ts`/`dur` are microseconds written with three
/// decimals (exact ns), `pid` 1, `tid` the lane, `args` `{"frame": N}`. Metadata (`"ph":"M"`)
/// events name the process `"redline"` and each lane present `"lane N"` (`u16::MAX`:
/// `"scheduler"`).
///
/// Off the hot path: allocates (buffering, lane set). Output is buffered internally and flushed
/// before returning.
pub fn write_chrome_trace<W: Write>(
    w: W,
    spans: &SpanRing,
    stage_names: &[&str],
) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    w.write_all(b"{\"traceEvents\":[\n")?;
    w.write_all(
        b"{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"redline\"}}",
    )?;

    let lanes: BTreeSet<u16> = spans.iter().map(|s| s.lane).collect();
    for lane in lanes {
        write!(
            w,
            ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{lane},\"args\":{{\"name\":"
        )?;
        if lane == u16::MAX {
            write_json_str(&mut w, "scheduler")?;
        } else {
            write_json_str(&mut w, &format!("lane {lane}"))?;
        }
        w.write_all(b"}}")?;
    }

    for s in spans.iter() {
        w.write_all(b",\n{\"name\":")?;
        match s.kind {
            SpanKind::Publish => write_json_str(&mut w, "publish")?,
            SpanKind::FrameFallback => write_json_str(&mut w, "frame fallback")?,
            _ => match stage_names.get(usize::from(s.stage)) {
                Some(name) => write_json_str(&mut w, name)?,
                None => write_json_str(&mut w, &format!("stage#{}", s.stage))?,
            },
        }
        write!(w, ",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":", s.kind.as_str())?;
        write_us(&mut w, s.start_ns)?;
        w.write_all(b",\"dur\":")?;
        write_us(&mut w, s.end_ns.saturating_sub(s.start_ns))?;
        write!(
            w,
            ",\"pid\":1,\"tid\":{},\"args\":{{\"frame\":{}}}}}",
            s.lane, s.frame
        )?;
    }

    w.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn span(stage: u16, frame: u64, lane: u16, start_ns: u64, end_ns: u64, kind: SpanKind) -> Span {
        Span {
            stage,
            frame,
            lane,
            start_ns,
            end_ns,
            kind,
        }
    }

    fn frames(r: &SpanRing) -> Vec<u64> {
        r.iter().map(|s| s.frame).collect()
    }

    #[test]
    fn ring_fills_then_wraps_oldest_first() {
        let mut r = SpanRing::new(3);
        assert!(r.is_empty());
        assert_eq!(r.capacity(), 3);
        for f in 0..2 {
            r.push(span(0, f, 0, f, f + 1, SpanKind::Run));
        }
        assert_eq!(frames(&r), vec![0, 1]);
        assert_eq!(r.overwritten(), 0);
        for f in 2..8 {
            r.push(span(0, f, 0, f, f + 1, SpanKind::Run));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(frames(&r), vec![5, 6, 7]);
        assert_eq!(r.overwritten(), 5);
        r.push(span(0, 8, 0, 8, 9, SpanKind::Run));
        assert_eq!(frames(&r), vec![6, 7, 8]);
        assert_eq!(r.overwritten(), 6);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.overwritten(), 0);
        assert_eq!(r.capacity(), 3);
        r.push(span(0, 9, 0, 9, 10, SpanKind::Run));
        assert_eq!(frames(&r), vec![9]);
    }

    #[test]
    fn ring_never_reallocates() {
        let mut r = SpanRing::new(5);
        let ptr = r.buf.as_ptr();
        for f in 0..100 {
            r.push(span(0, f, 0, 0, 0, SpanKind::Run));
        }
        assert_eq!(r.buf.as_ptr(), ptr);
        assert_eq!(frames(&r), vec![95, 96, 97, 98, 99]);
    }

    #[test]
    fn capacity_zero_ring_is_a_no_op() {
        let mut r = SpanRing::new(0);
        for f in 0..10 {
            r.push(span(0, f, 0, 0, 1, SpanKind::Run));
        }
        assert!(r.is_empty());
        assert_eq!(r.len(), 0);
        assert_eq!(r.capacity(), 0);
        assert_eq!(r.overwritten(), 0);
        assert_eq!(r.iter().count(), 0);
        let mut out = Vec::new();
        write_chrome_trace(&mut out, &r, &[]).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["traceEvents"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn chrome_trace_parses_and_is_correct() {
        let mut r = SpanRing::new(16);
        r.push(span(0, 7, 0, 1_234_567, 1_240_000, SpanKind::Run));
        r.push(span(1, 7, 1, 1_000, 999, SpanKind::Fallback));
        r.push(span(9, 7, 1, 5, 5, SpanKind::Skipped));
        r.push(span(
            0,
            7,
            u16::MAX,
            2_000_001,
            2_000_002,
            SpanKind::Publish,
        ));
        r.push(span(
            1,
            8,
            u16::MAX,
            3_000_000,
            3_000_500,
            SpanKind::FrameFallback,
        ));
        let names = ["det\"ect \\ \u{1}", "bev"];
        let mut out = Vec::new();
        write_chrome_trace(&mut out, &r, &names).unwrap();
        let v: Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["displayTimeUnit"], "ns");
        let evs = v["traceEvents"].as_array().unwrap();

        let xs: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(xs.len(), 5);
        assert_eq!(xs[0]["name"], names[0]);
        assert_eq!(xs[0]["cat"], "run");
        assert!((xs[0]["ts"].as_f64().unwrap() - 1234.567).abs() < 1e-9);
        assert!((xs[0]["dur"].as_f64().unwrap() - 5.433).abs() < 1e-9);
        assert_eq!(xs[0]["pid"], 1);
        assert_eq!(xs[0]["tid"], 0);
        assert_eq!(xs[0]["args"]["frame"], 7);
        assert_eq!(xs[1]["name"], "bev");
        assert_eq!(xs[1]["cat"], "fallback");
        assert_eq!(xs[1]["dur"].as_f64().unwrap(), 0.0);
        assert!((xs[1]["ts"].as_f64().unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(xs[2]["name"], "stage#9");
        assert_eq!(xs[2]["cat"], "skipped");
        assert!((xs[2]["ts"].as_f64().unwrap() - 0.005).abs() < 1e-12);
        assert_eq!(xs[3]["name"], "publish");
        assert_eq!(xs[3]["cat"], "publish");
        assert_eq!(xs[3]["tid"], u16::MAX);
        assert!((xs[3]["dur"].as_f64().unwrap() - 0.001).abs() < 1e-12);
        assert_eq!(xs[4]["name"], "frame fallback");
        assert_eq!(xs[4]["cat"], "frame_fallback");
        assert_eq!(xs[4]["args"]["frame"], 8);
        assert!((xs[4]["dur"].as_f64().unwrap() - 0.5).abs() < 1e-12);

        let ms: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "M").collect();
        assert_eq!(ms.len(), 4, "process + lanes 0, 1, scheduler");
        let name_of = |tid: u64| {
            ms.iter()
                .find(|m| m["name"] == "thread_name" && m["tid"] == tid)
                .map(|m| m["args"]["name"].as_str().unwrap().to_owned())
        };
        assert_eq!(name_of(0).as_deref(), Some("lane 0"));
        assert_eq!(name_of(1).as_deref(), Some("lane 1"));
        assert_eq!(name_of(u64::from(u16::MAX)).as_deref(), Some("scheduler"));
        assert!(ms
            .iter()
            .any(|m| m["name"] == "process_name" && m["args"]["name"] == "redline"));
    }

    #[test]
    fn chrome_trace_exports_oldest_first_after_wrap() {
        let mut r = SpanRing::new(2);
        for f in 0..5u64 {
            r.push(span(0, f, 0, f * 10, f * 10 + 1, SpanKind::Run));
        }
        let mut out = Vec::new();
        write_chrome_trace(&mut out, &r, &["a"]).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let frames: Vec<u64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["args"]["frame"].as_u64().unwrap())
            .collect();
        assert_eq!(frames, vec![3, 4]);
    }
}
