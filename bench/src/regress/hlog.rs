//! HdrHistogram interval logs (`.hlog`): the standard text format of HdrHistogram's
//! `HistogramLogWriter`, read by its `HistogramLogReader` / `HistogramLogProcessor` (Java)
//! and by HdrHistogram_py's `HistogramLogReader`.
//!
//! One interval per replay and per histogram: the interval starts when the replay's
//! measured frames started and lasts as long as they ran; its tag names the histogram
//! (`end_to_end` or a stage, prefixed with the side in A/B mode, e.g.
//! `candidate.backbone`). Values are nanoseconds; the `Max` column is divided by 10^6
//! (milliseconds), as the `#[MaxValueDivisor]` header says. Timestamps are seconds since
//! the `#[BaseTime]` header (the first replay's start).
//!
//! Off the hot path: called once after all replays.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use redline_runtime::metrics::LatencyHistogram;

/// One histogram over one interval.
#[derive(Debug)]
pub struct Interval<'a> {
    /// Tag: letters, digits, `.`, `_`, `-` (no spaces or commas).
    pub tag: String,
    /// When the interval started, ms since the Unix epoch.
    pub start_unix_ms: u64,
    /// How long it lasted, ms.
    pub duration_ms: f64,
    /// The values recorded in it.
    pub hist: &'a LatencyHistogram,
}

/// Writes `intervals` (sorted by start here) as an interval log at `path`.
pub fn write_hlog(
    path: &Path,
    intervals: &mut [Interval<'_>],
    comment: &str,
) -> std::io::Result<()> {
    intervals.sort_by_key(|i| i.start_unix_ms);
    let base_ms = intervals.first().map_or(0, |i| i.start_unix_ms);
    let base = UNIX_EPOCH + Duration::from_millis(base_ms);
    let mut buf: Vec<u8> = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    {
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .add_comment("values in nanoseconds; Max column in milliseconds")
            .with_start_time(base.max(UNIX_EPOCH))
            .with_base_time(base)
            .with_max_value_divisor(1e6)
            .begin_log_with(&mut buf, &mut ser)?;
        for i in intervals.iter() {
            let tag = sanitize(&i.tag);
            let start = Duration::from_millis(i.start_unix_ms - base_ms);
            let len = Duration::from_secs_f64((i.duration_ms / 1e3).max(0.0));
            w.write_histogram(i.hist.as_hdr(), start, len, Tag::new(&tag))
                .map_err(|e| std::io::Error::other(format!("{e}")))?;
        }
    }
    std::fs::write(path, buf)
}

/// A tag HdrHistogram's readers accept: no whitespace, commas or `=`.
fn sanitize(tag: &str) -> String {
    tag.chars()
        .map(|c| {
            if c.is_whitespace() || c == ',' || c == '=' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn written_logs_read_back_interval_by_interval() {
        let mut a = LatencyHistogram::new();
        (1..=1000u64).for_each(|v| a.record(v * 1000));
        let mut b = LatencyHistogram::new();
        b.record(5_000_000);
        let dir = std::env::temp_dir().join(format!("redline-hlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.hlog");
        let mut iv = vec![
            Interval {
                tag: "candidate.backbone".into(),
                start_unix_ms: 1_700_000_002_500,
                duration_ms: 1000.0,
                hist: &b,
            },
            Interval {
                tag: "end to,end".into(),
                start_unix_ms: 1_700_000_000_000,
                duration_ms: 2000.0,
                hist: &a,
            },
        ];
        write_hlog(&path, &mut iv, "redline test").unwrap();
        let text = std::fs::read(&path).unwrap();
        let s = String::from_utf8_lossy(&text);
        assert!(s.contains("#[BaseTime: 1700000000.000"), "{s}");
        assert!(s.contains("#[MaxValueDivisor: 1000000.000]"), "{s}");
        let entries: Vec<_> = IntervalLogIterator::new(&text)
            .filter_map(|e| match e.unwrap() {
                LogEntry::Interval(h) => Some((
                    h.tag().map(|t| t.as_str().to_string()),
                    h.start_timestamp(),
                    h.duration(),
                    h.max(),
                    h.encoded_histogram().to_string(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].0.as_deref(), Some("end_to_end"));
        assert_eq!(entries[0].1, Duration::ZERO);
        assert_eq!(entries[0].2, Duration::from_secs(2));
        assert!(
            (entries[0].3 - 1.0).abs() < 0.002,
            "max 1 ms: {}",
            entries[0].3
        );
        assert_eq!(entries[1].0.as_deref(), Some("candidate.backbone"));
        assert_eq!(entries[1].1, Duration::from_millis(2500));
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&entries[0].4)
            .unwrap();
        let h: hdrhistogram::Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        assert_eq!(h.len(), 1000);
        assert_eq!(
            h.value_at_quantile(0.99),
            a.as_hdr().value_at_quantile(0.99)
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
