//! Hand-written SVG plots for regression reports: latency percentile distributions and
//! per-frame latency timelines. No plotting crate; every function returns a complete,
//! standalone SVG 1.1 document of 900 × 500 px.
//!
//! # Contract
//!
//! - [`percentile_svg`] draws HdrHistogram-style percentile distributions of one or more
//!   [`LatencyHistogram`]s (one polyline per non-empty series, distinct colours, a legend with
//!   each series' P50/P99/max in ms, empty series listed as "(no samples)" without a curve) and
//!   an optional dashed horizontal limit line (a deadline or budget) labelled with its value.
//! - [`timeline_svg`] draws per-frame end-to-end latency against the frame number, with fallback
//!   frames as red crosses, a dashed deadline line labelled "deadline X ms" and a vertical line
//!   per mode change, labelled; with no frames it still draws the axes and a "no frames" note.
//! - Both y axes are latency in ms, linear from 0 up to a "nice" bound (a multiple of the tick
//!   step) at least 5 % above the largest of the data and the limit/deadline line. Every tick
//!   step, on every axis with numeric ticks, is 1, 2 or 5 × 10^k.
//! - Off the hot path: these functions allocate (the timeline sorts a copy of its frames, the
//!   output is a fresh `String`) and scan whole histograms. Call them after a run, never from a
//!   stage or the scheduler loop.
//! - All text (titles, labels) is XML-escaped; characters that XML 1.0 forbids (control
//!   characters other than tab, newline and carriage return, U+FFFE, U+FFFF) become U+FFFD.
//!   Coordinates are printed with at most 2 decimals to keep files small.
//!
//! # Percentile plot x axis
//!
//! A percentile p (0 ≤ p < 1) is drawn at x = log10(1 / (1 − p)), linear in that quantity:
//! 0 % → 0, 90 % → 1, 99 % → 2, 99.9 % → 3, 99.99 % → 4, 99.999 % → 5 (the right edge; those
//! six are the ticks). Each curve samples `value_at_quantile` at one point every 2 px; its last
//! point, on the right edge, is the maximum (p = 100 % has no finite position, so everything past
//! 99.999 % is folded onto the edge). Values are hdrhistogram's bucket values (within 0.1 %).
//!
//! # Timeline decimation
//!
//! Frames are sorted by frame number and each maps to one 1-px column of the plot area. With
//! at most 2 frames per column on average (n ≤ 2 × columns) every frame is drawn (and, up to 200
//! frames, dotted). Beyond that each column keeps only its lowest- and highest-latency frames,
//! in frame order, so the polyline has at most 2 points per column and every spike (and every
//! dip) stays visible; fallback crosses likewise keep the highest-latency fallback frame of each
//! column, and mode changes falling in the same column share one line whose label gets "(+N)".
//! The file size is thus bounded by the plot width, not the frame count (about 30 KiB for
//! 100k frames).

use std::fmt::{self, Write as _};

use redline_runtime::metrics::LatencyHistogram;

/// One curve on a percentile plot.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Legend label (any text; escaped on output).
    pub label: &'a str,
    /// Latencies in nanoseconds.
    pub hist: &'a LatencyHistogram,
}

/// One frame on a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineFrame {
    /// Frame number (x axis).
    pub frame: u64,
    /// End-to-end latency of the frame, in nanoseconds (y axis).
    pub latency_ns: u64,
    /// Whether the frame's fallback was published instead of its result.
    pub fallback: bool,
}

/// A mode change, drawn as a vertical line after `after_frame` with its label
/// (e.g. "nominal → reduced").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeMark {
    /// The last frame before the change; the line is drawn half a frame after it.
    pub after_frame: u64,
    /// Label drawn next to the line (any text; escaped on output).
    pub label: String,
}

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 500.0;
/// Plot area: left, right, top and bottom edges in px.
const X0: f64 = 72.0;
const X1: f64 = WIDTH - 40.0;
const Y0: f64 = 44.0;
const Y1: f64 = HEIGHT - 76.0;

/// Series colours (no red: red is for limits and fallbacks).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
];
const LIMIT_COLOUR: &str = "#d62728";
const FALLBACK_COLOUR: &str = "#d62728";
const MARK_COLOUR: &str = "#7b3294";
const GRID_COLOUR: &str = "#e3e3e3";

/// Decades of 1/(1-p) on the percentile plot's x axis (0 % .. 99.999 %).
const DECADES: f64 = 5.0;
const PERCENTILE_TICKS: [(f64, &str); 6] = [
    (0.0, "0%"),
    (1.0, "90%"),
    (2.0, "99%"),
    (3.0, "99.9%"),
    (4.0, "99.99%"),
    (5.0, "99.999%"),
];
/// Up to this many frames, each frame also gets a dot.
const DOT_LIMIT: usize = 200;

/// HdrHistogram-style percentile distribution: x axis is the percentile on a log scale of 1/(1-p)
/// (ticks at 0%, 90%, 99%, 99.9%, 99.99%, 99.999%), y axis latency in ms (linear, from 0).
/// One polyline per series (distinct colours, legend with label and the series' P50/P99/max in ms),
/// an optional horizontal dashed line for a limit (e.g. the deadline or budget) labelled with its value.
/// Empty histograms are drawn as a legend entry "(no samples)" with no polyline. Returns a complete SVG document.
pub fn percentile_svg(title: &str, series: &[Series<'_>], limit_ns: Option<(&str, u64)>) -> String {
    let summaries: Vec<_> = series.iter().map(|s| s.hist.summary()).collect();
    let data_max = summaries.iter().map(|s| s.max_ns).max().unwrap_or(0);
    let limit_max = limit_ns.map_or(0, |(_, v)| v);
    let y = YAxis::covering(ns_to_ms(data_max.max(limit_max)));

    let mut d = Doc::new(title);
    y.draw(&mut d.s);
    for (decade, label) in PERCENTILE_TICKS {
        let px = decade_px(decade);
        let _ = writeln!(
            d.s,
            "<line x1=\"{x}\" y1=\"{Y0}\" x2=\"{x}\" y2=\"{Y1}\" stroke=\"{GRID_COLOUR}\"/>\
             <text class=\"xtick\" x=\"{x}\" y=\"{ty}\" text-anchor=\"middle\">{label}</text>",
            x = N(px),
            ty = N(Y1 + 18.0),
        );
    }
    d.axis_titles("percentile (log scale of 1/(1\u{2212}p))");

    let samples = ((X1 - X0) / 2.0).round() as usize;
    for (i, s) in series.iter().enumerate() {
        if s.hist.count() == 0 {
            continue;
        }
        let hdr = s.hist.as_hdr();
        let mut pts = Vec::with_capacity(samples + 1);
        for k in 0..=samples {
            let decade = DECADES * k as f64 / samples as f64;
            let q = if k == samples {
                1.0
            } else {
                1.0 - 10f64.powf(-decade)
            };
            pts.push((decade_px(decade), y.px(ns_to_ms(hdr.value_at_quantile(q)))));
        }
        let _ = write!(
            d.s,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" \
             stroke-linejoin=\"round\" points=\"",
            colour(i)
        );
        write_points(&mut d.s, &drop_flat_interior(&pts));
        d.s.push_str("\"/>\n");
    }

    if let Some((name, ns)) = limit_ns {
        d.limit_line(&y, &format!("{name} {} ms", fmt_ms(ns)), ns);
    }

    if series.is_empty() {
        d.note("no series");
    } else {
        let rows: Vec<String> = series
            .iter()
            .zip(&summaries)
            .map(|(s, sum)| {
                if sum.count == 0 {
                    format!("{}: (no samples)", s.label)
                } else {
                    format!(
                        "{}: P50 {} ms, P99 {} ms, max {} ms",
                        s.label,
                        fmt_ms(sum.p50_ns),
                        fmt_ms(sum.p99_ns),
                        fmt_ms(sum.max_ns)
                    )
                }
            })
            .collect();
        let longest = rows.iter().map(|r| r.chars().count()).max().unwrap_or(0);
        let (lx, ly) = (X0 + 8.0, Y0 + 8.0);
        let _ = writeln!(
            d.s,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"white\" \
             fill-opacity=\"0.85\" stroke=\"#999999\"/>",
            N(lx),
            N(ly),
            N((text_width(longest) + 44.0).min(X1 - lx - 8.0)),
            N(rows.len() as f64 * 18.0 + 8.0),
        );
        for (i, row) in rows.iter().enumerate() {
            let ry = ly + 16.0 + i as f64 * 18.0;
            let _ = writeln!(
                d.s,
                "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{}\" \
                 stroke-width=\"2\"/><text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>",
                N(lx + 8.0),
                N(lx + 32.0),
                colour(i),
                N(lx + 38.0),
                N(ry),
                Esc(row),
                ly = N(ry - 4.0),
            );
        }
    }
    d.finish()
}

/// Per-frame end-to-end latency: x = frame number, y = latency ms; points/polyline for the frames,
/// fallback frames marked distinctly (e.g. red crosses), a horizontal dashed deadline line labelled
/// "deadline X ms", vertical lines for mode changes with their labels. Handles 0 frames (draws axes and
/// a "no frames" note) and up to ~100k frames (decimate sensibly, e.g. min/max per pixel column, so the
/// file stays under ~1 MB while keeping every spike visible). Returns a complete SVG document.
pub fn timeline_svg(
    title: &str,
    frames: &[TimelineFrame],
    deadline_ns: u64,
    marks: &[ModeMark],
) -> String {
    let mut sorted: Vec<&TimelineFrame> = frames.iter().collect();
    sorted.sort_by_key(|f| f.frame);
    let mut sorted_marks: Vec<&ModeMark> = marks.iter().collect();
    sorted_marks.sort_by_key(|m| m.after_frame);

    let max_latency = sorted.iter().map(|f| f.latency_ns).max().unwrap_or(0);
    let y = YAxis::covering(ns_to_ms(max_latency.max(deadline_ns)));
    let lo = sorted
        .first()
        .map(|f| f.frame)
        .into_iter()
        .chain(sorted_marks.first().map(|m| m.after_frame))
        .min();
    let hi = sorted
        .last()
        .map(|f| f.frame)
        .into_iter()
        .chain(sorted_marks.last().map(|m| m.after_frame.saturating_add(1)))
        .max();
    let x = XAxis::covering(lo.unwrap_or(0), hi.unwrap_or(1));

    let mut d = Doc::new(title);
    y.draw(&mut d.s);
    x.draw(&mut d.s);
    d.axis_titles("frame");

    // Decimation: frames are sorted and x is monotonic, so each column is one contiguous run.
    let cols = (X1 - X0).floor() as usize;
    let col_of = |px: f64| ((px - X0).floor().max(0.0) as usize).min(cols - 1);
    let decimate = sorted.len() > 2 * cols;
    let mut line: Vec<&TimelineFrame> = Vec::new();
    let mut crosses: Vec<&TimelineFrame> = Vec::new();
    if decimate {
        let mut i = 0;
        while i < sorted.len() {
            let c = col_of(x.px(sorted[i].frame as f64));
            let (mut lo_i, mut hi_i, mut fb) = (i, i, None::<usize>);
            let mut j = i;
            while j < sorted.len() && col_of(x.px(sorted[j].frame as f64)) == c {
                let f = sorted[j];
                if f.latency_ns < sorted[lo_i].latency_ns {
                    lo_i = j;
                }
                if f.latency_ns > sorted[hi_i].latency_ns {
                    hi_i = j;
                }
                if f.fallback && fb.is_none_or(|b| f.latency_ns > sorted[b].latency_ns) {
                    fb = Some(j);
                }
                j += 1;
            }
            line.push(sorted[lo_i.min(hi_i)]);
            if lo_i != hi_i {
                line.push(sorted[lo_i.max(hi_i)]);
            }
            crosses.extend(fb.map(|b| sorted[b]));
            i = j;
        }
    } else {
        line.extend(sorted.iter().copied());
        crosses.extend(sorted.iter().copied().filter(|f| f.fallback));
    }
    let point = |f: &TimelineFrame| (x.px(f.frame as f64), y.px(ns_to_ms(f.latency_ns)));

    if !line.is_empty() {
        d.s.push_str(
            "<polyline class=\"latency\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1\" \
             stroke-linejoin=\"round\" points=\"",
        );
        let pts: Vec<_> = line.iter().map(|f| point(f)).collect();
        write_points(&mut d.s, &pts);
        d.s.push_str("\"/>\n");
        if sorted.len() <= DOT_LIMIT {
            d.s.push_str("<g class=\"dots\" fill=\"#1f77b4\">");
            for (px, py) in pts {
                let _ = write!(d.s, "<circle cx=\"{}\" cy=\"{}\" r=\"2\"/>", N(px), N(py));
            }
            d.s.push_str("</g>\n");
        }
    }
    if !crosses.is_empty() {
        let _ = write!(
            d.s,
            "<g class=\"fallback\" fill=\"none\" stroke=\"{FALLBACK_COLOUR}\" stroke-width=\"1.5\">"
        );
        for f in &crosses {
            let (px, py) = point(f);
            let _ = write!(
                d.s,
                "<path d=\"M{} {}l7 7m-7 0l7-7\"/>",
                N(px - 3.5),
                N(py - 3.5)
            );
        }
        d.s.push_str("</g>\n");
    }

    d.limit_line(
        &y,
        &format!("deadline {} ms", fmt_ms(deadline_ns)),
        deadline_ns,
    );

    // Mode marks: one line per pixel column; extra marks in the same column are counted.
    let mut groups: Vec<(f64, &str, usize)> = Vec::new();
    for m in &sorted_marks {
        let px = x.px(m.after_frame as f64 + 0.5).clamp(X0, X1);
        match groups.last_mut() {
            Some(g) if col_of(g.0) == col_of(px) => g.2 += 1,
            _ => groups.push((px, &m.label, 0)),
        }
    }
    for (k, (px, label, extra)) in groups.iter().enumerate() {
        let text = if *extra > 0 {
            format!("{label} (+{extra})")
        } else {
            (*label).to_owned()
        };
        let right = px + 3.0 + text_width(text.chars().count()) > X1;
        let _ = writeln!(
            d.s,
            "<line class=\"mode\" x1=\"{x}\" y1=\"{Y0}\" x2=\"{x}\" y2=\"{Y1}\" \
             stroke=\"{MARK_COLOUR}\" stroke-dasharray=\"3 3\"/>\
             <text class=\"mode-label\" x=\"{tx}\" y=\"{ty}\" fill=\"{MARK_COLOUR}\"{anchor}>{t}</text>",
            x = N(*px),
            tx = N(if right { px - 3.0 } else { px + 3.0 }),
            ty = N(Y0 + 14.0 + (k % 4) as f64 * 14.0),
            anchor = if right { " text-anchor=\"end\"" } else { "" },
            t = Esc(&text),
        );
    }

    if sorted.is_empty() {
        d.note("no frames");
    }

    // Legend, one row under the x axis title.
    let ly = HEIGHT - 12.0;
    let mut lx = X0;
    let mut latency_text = format!("latency ({} frames", sorted.len());
    if decimate {
        latency_text.push_str(", min/max per pixel column");
    }
    latency_text.push(')');
    let _ = writeln!(
        d.s,
        "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\
         <text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>",
        N(lx),
        N(lx + 20.0),
        N(lx + 24.0),
        N(ly),
        Esc(&latency_text),
        y = N(ly - 4.0),
    );
    lx += 24.0 + text_width(latency_text.chars().count()) + 16.0;
    let fallbacks = sorted.iter().filter(|f| f.fallback).count();
    let fb_text = format!("fallback ({fallbacks} frames)");
    let _ = writeln!(
        d.s,
        "<path d=\"M{} {}l7 7m-7 0l7-7\" fill=\"none\" stroke=\"{FALLBACK_COLOUR}\" \
         stroke-width=\"1.5\"/><text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>",
        N(lx + 6.5),
        N(ly - 7.5),
        N(lx + 24.0),
        N(ly),
        Esc(&fb_text),
    );
    lx += 24.0 + text_width(fb_text.chars().count()) + 16.0;
    let mode_text = format!("mode change ({})", marks.len());
    let _ = writeln!(
        d.s,
        "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"{MARK_COLOUR}\" \
         stroke-dasharray=\"3 3\"/><text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>",
        N(ly - 11.0),
        N(ly + 2.0),
        N(lx + 8.0),
        N(ly),
        Esc(&mode_text),
        x = N(lx + 3.0),
    );
    d.finish()
}

/// The SVG document being written.
struct Doc {
    s: String,
}

impl Doc {
    /// Opens the document and draws the background and the title.
    fn new(title: &str) -> Self {
        let mut s = String::with_capacity(32 * 1024);
        let _ = write!(
            s,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{WIDTH}\" \
             height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" \
             font-size=\"12\">\n<title>{t}</title>\n\
             <rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>\n\
             <text class=\"title\" x=\"{}\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" \
             font-weight=\"bold\">{t}</text>\n",
            N(WIDTH / 2.0),
            t = Esc(title),
        );
        Self { s }
    }

    /// Draws the plot frame and the axis titles (x: `x_title`, y: latency in ms).
    fn axis_titles(&mut self, x_title: &str) {
        let my = (Y0 + Y1) / 2.0;
        let _ = write!(
            self.s,
            "<rect x=\"{X0}\" y=\"{Y0}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333333\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
             <text x=\"18\" y=\"{my}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {my})\">\
             latency (ms)</text>\n",
            N(X1 - X0),
            N(Y1 - Y0),
            N((X0 + X1) / 2.0),
            N(Y1 + 38.0),
            Esc(x_title),
            my = N(my),
        );
    }

    /// Draws a dashed horizontal line at `ns` with `label` above its right end (below it when
    /// the line is near the top).
    fn limit_line(&mut self, y: &YAxis, label: &str, ns: u64) {
        let py = y.px(ns_to_ms(ns));
        let ty = if py - Y0 < 16.0 { py + 14.0 } else { py - 5.0 };
        let _ = writeln!(
            self.s,
            "<line class=\"limit\" x1=\"{X0}\" y1=\"{py}\" x2=\"{X1}\" y2=\"{py}\" \
             stroke=\"{LIMIT_COLOUR}\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\
             <text class=\"limit-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" \
             fill=\"{LIMIT_COLOUR}\">{}</text>",
            N(X1 - 6.0),
            N(ty),
            Esc(label),
            py = N(py),
        );
    }

    /// Writes a grey note in the middle of the plot area.
    fn note(&mut self, text: &str) {
        let _ = writeln!(
            self.s,
            "<text class=\"note\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#777777\" \
             font-size=\"14\">{}</text>",
            N((X0 + X1) / 2.0),
            N((Y0 + Y1) / 2.0),
            Esc(text),
        );
    }

    /// Closes the document.
    fn finish(mut self) -> String {
        self.s.push_str("</svg>\n");
        self.s
    }
}

/// A linear latency axis in ms from 0 to `hi`, ticks every `step`.
#[derive(Debug, Clone, Copy)]
struct YAxis {
    hi: f64,
    step: f64,
    intervals: u32,
}

impl YAxis {
    /// An axis whose top is at least 5 % above `max_ms` (1 ms when `max_ms` is 0).
    fn covering(max_ms: f64) -> Self {
        let top = if max_ms > 0.0 { max_ms * 1.05 } else { 1.0 };
        let step = nice_step(top, 8.0);
        let intervals = (top / step - 1e-9).ceil().max(1.0);
        Self {
            hi: intervals * step,
            step,
            intervals: intervals as u32,
        }
    }

    /// Pixel row of `ms`.
    fn px(&self, ms: f64) -> f64 {
        Y1 - ms / self.hi * (Y1 - Y0)
    }

    /// Grid lines and tick labels.
    fn draw(&self, s: &mut String) {
        let decimals = step_decimals(self.step);
        for i in 0..=self.intervals {
            let v = f64::from(i) * self.step;
            let py = self.px(v);
            let _ = writeln!(
                s,
                "<line x1=\"{X0}\" y1=\"{py}\" x2=\"{X1}\" y2=\"{py}\" stroke=\"{GRID_COLOUR}\"/>\
                 <text class=\"ytick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{v:.decimals$}</text>",
                N(X0 - 6.0),
                N(py + 4.0),
                py = N(py),
            );
        }
    }
}

/// A linear frame-number axis from `lo` to `hi` (multiples of `step`, an integer ≥ 1).
#[derive(Debug, Clone, Copy)]
struct XAxis {
    lo: f64,
    hi: f64,
    step: f64,
}

impl XAxis {
    /// An axis covering frames `lo..=hi`, extended to multiples of the tick step.
    fn covering(lo: u64, hi: u64) -> Self {
        let span = hi.saturating_sub(lo).max(1) as f64;
        let step = nice_step(span, 10.0).max(1.0);
        let lo_n = (lo as f64 / step).floor() * step;
        let mut hi_n = (hi as f64 / step).ceil() * step;
        if hi_n <= lo_n {
            hi_n = lo_n + step;
        }
        Self {
            lo: lo_n,
            hi: hi_n,
            step,
        }
    }

    /// Pixel column of frame `f`.
    fn px(&self, f: f64) -> f64 {
        let span = self.hi - self.lo;
        if span > 0.0 {
            X0 + (f - self.lo) / span * (X1 - X0)
        } else {
            // Frame numbers near u64::MAX: f64 cannot tell lo from hi.
            (X0 + X1) / 2.0
        }
    }

    /// Grid lines and tick labels.
    fn draw(&self, s: &mut String) {
        let n = ((self.hi - self.lo) / self.step).round() as u64;
        for i in 0..=n {
            let v = self.lo + i as f64 * self.step;
            let px = self.px(v);
            let _ = writeln!(
                s,
                "<line x1=\"{px}\" y1=\"{Y0}\" x2=\"{px}\" y2=\"{Y1}\" stroke=\"{GRID_COLOUR}\"/>\
                 <text class=\"xtick\" x=\"{px}\" y=\"{}\" text-anchor=\"middle\">{v:.0}</text>",
                N(Y1 + 18.0),
                px = N(px),
            );
        }
    }
}

/// The smallest step of the form 1, 2 or 5 × 10^k that splits `span` into at most
/// `max_intervals` intervals.
fn nice_step(span: f64, max_intervals: f64) -> f64 {
    let raw = (span / max_intervals).max(1e-12);
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * base)
        .find(|step| *step >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * base)
}

/// Decimals needed to print multiples of `step` exactly (step = 1, 2 or 5 × 10^k).
fn step_decimals(step: f64) -> usize {
    (-step.log10() - 1e-9).ceil().max(0.0) as usize
}

/// Pixel column of `decade` = log10(1/(1-p)) on the percentile plot.
fn decade_px(decade: f64) -> f64 {
    X0 + decade / DECADES * (X1 - X0)
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Formats nanoseconds as milliseconds: 3 decimals, more (up to 6) below 0.1 ms so that
/// about 3 significant digits remain.
fn fmt_ms(ns: u64) -> String {
    let ms = ns_to_ms(ns);
    let decimals = if ms == 0.0 || ms >= 0.1 {
        3
    } else {
        (2.0 - ms.log10().floor()).clamp(3.0, 6.0) as usize
    };
    format!("{ms:.decimals$}")
}

/// Estimated width in px of `chars` characters at font-size 12.
fn text_width(chars: usize) -> f64 {
    chars as f64 * 6.6
}

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Drops the interior points of horizontal runs (same printed y), which draw nothing.
fn drop_flat_interior(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let same = |a: f64, b: f64| (a * 100.0).round() == (b * 100.0).round();
    let mut out = Vec::with_capacity(pts.len());
    for (i, &p) in pts.iter().enumerate() {
        let interior =
            i > 0 && i + 1 < pts.len() && same(pts[i - 1].1, p.1) && same(pts[i + 1].1, p.1);
        if !interior {
            out.push(p);
        }
    }
    out
}

fn write_points(s: &mut String, pts: &[(f64, f64)]) {
    for (i, (px, py)) in pts.iter().enumerate() {
        let sep = if i == 0 { "" } else { " " };
        let _ = write!(s, "{sep}{},{}", N(*px), N(*py));
    }
}

/// A coordinate printed with at most 2 decimals, trailing zeros dropped.
struct N(f64);

impl fmt::Display for N {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = (self.0 * 100.0).round();
        let c = if c.is_finite() { c as i64 } else { 0 };
        let sign = if c < 0 { "-" } else { "" };
        let a = c.unsigned_abs();
        let (int, frac) = (a / 100, a % 100);
        if frac == 0 {
            write!(f, "{sign}{int}")
        } else if frac % 10 == 0 {
            write!(f, "{sign}{int}.{}", frac / 10)
        } else {
            write!(f, "{sign}{int}.{frac:02}")
        }
    }
}

/// Text escaped for XML content and attribute values.
struct Esc<'a>(&'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for ch in self.0.chars() {
            match ch {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&apos;")?,
                '\t' | '\n' | '\r' => f.write_char(ch)?,
                c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                    f.write_char('\u{FFFD}')?
                }
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(svg: &str) -> roxmltree::Document<'_> {
        match roxmltree::Document::parse(svg) {
            Ok(doc) => doc,
            Err(e) => panic!("invalid XML: {e}\n{svg}"),
        }
    }

    fn with_class<'a, 'i>(
        doc: &'a roxmltree::Document<'i>,
        class: &str,
    ) -> Vec<roxmltree::Node<'a, 'i>> {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(class))
            .collect()
    }

    fn attr(n: &roxmltree::Node<'_, '_>, name: &str) -> f64 {
        n.attribute(name).unwrap().parse().unwrap()
    }

    fn points(n: &roxmltree::Node<'_, '_>) -> Vec<(f64, f64)> {
        n.attribute("points")
            .unwrap()
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    /// (value, label y) of every y tick, read back from the SVG.
    fn y_ticks(doc: &roxmltree::Document<'_>) -> Vec<(f64, f64)> {
        with_class(doc, "ytick")
            .iter()
            .map(|n| (n.text().unwrap().parse().unwrap(), attr(n, "y") - 4.0))
            .collect()
    }

    /// Maps a pixel row back to ms using the first and last y tick of the document.
    fn ms_at(doc: &roxmltree::Document<'_>, py: f64) -> f64 {
        let t = y_ticks(doc);
        let ((v0, y0), (v1, y1)) = (t[0], t[t.len() - 1]);
        v0 + (py - y0) / (y1 - y0) * (v1 - v0)
    }

    /// Asserts that tick values start at `first`, are evenly spaced and that the spacing is
    /// 1, 2 or 5 × 10^k; returns the step.
    fn assert_nice(values: &[f64]) -> f64 {
        assert!(values.len() >= 3, "{values:?}");
        let step = values[1] - values[0];
        for w in values.windows(2) {
            assert!((w[1] - w[0] - step).abs() < step * 1e-6, "{values:?}");
        }
        let m = step / 10f64.powf(step.log10().floor());
        assert!(
            [1.0, 2.0, 5.0, 10.0].iter().any(|n| (m - n).abs() < 1e-6),
            "step {step} of {values:?} is not 1/2/5 x 10^k"
        );
        step
    }

    fn uniform_us(n: u64, scale: u64) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for us in 1..=n {
            h.record(us * 1000 * scale);
        }
        h
    }

    #[test]
    fn percentile_one_polyline_per_nonempty_series_and_legend_values() {
        let a = uniform_us(1000, 1);
        let b = uniform_us(1000, 2);
        let empty = LatencyHistogram::new();
        let series = [
            Series {
                label: "base",
                hist: &a,
            },
            Series {
                label: "idle",
                hist: &empty,
            },
            Series {
                label: "head",
                hist: &b,
            },
        ];
        let svg = percentile_svg("jitter", &series, None);
        let doc = parse(&svg);
        let lines = with_class(&doc, "series");
        assert_eq!(lines.len(), 2);
        assert_ne!(lines[0].attribute("stroke"), lines[1].attribute("stroke"));
        let legend: Vec<_> = with_class(&doc, "legend")
            .iter()
            .map(|n| n.text().unwrap().to_owned())
            .collect();
        assert_eq!(
            legend,
            [
                "base: P50 0.500 ms, P99 0.990 ms, max 1.000 ms",
                "idle: (no samples)",
                "head: P50 1.000 ms, P99 1.980 ms, max 2.001 ms",
            ]
        );
        assert!(with_class(&doc, "limit").is_empty());
        let xticks: Vec<_> = with_class(&doc, "xtick")
            .iter()
            .map(|n| n.text().unwrap())
            .collect();
        assert_eq!(xticks, ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]);
    }

    #[test]
    fn percentile_curve_is_monotonic_and_hits_known_values() {
        let a = uniform_us(1000, 1);
        let svg = percentile_svg(
            "t",
            &[Series {
                label: "a",
                hist: &a,
            }],
            None,
        );
        let doc = parse(&svg);
        let pts = points(&with_class(&doc, "series")[0]);
        // Non-decreasing latency (pixel rows non-increasing), left to right.
        for w in pts.windows(2) {
            assert!(w[1].0 > w[0].0 && w[1].1 <= w[0].1 + 1e-9, "{w:?}");
        }
        // Left edge = min (0.001 ms), right edge = max (1 ms).
        assert_eq!(pts[0].0, X0);
        assert_eq!(pts.last().unwrap().0, X1);
        assert!((ms_at(&doc, pts[0].1) - 0.001).abs() < 0.003);
        assert!((ms_at(&doc, pts.last().unwrap().1) - 1.0).abs() < 0.003);
        // At the 99 % tick (2 decades) the curve reads P99 = 0.99 ms.
        let x99 = decade_px(2.0);
        let p = pts
            .iter()
            .min_by(|a, b| (a.0 - x99).abs().total_cmp(&(b.0 - x99).abs()));
        let p = p.unwrap();
        assert!((p.0 - x99).abs() < 2.5, "{p:?}");
        assert!(
            (ms_at(&doc, p.1) - 0.99).abs() < 0.005,
            "{}",
            ms_at(&doc, p.1)
        );
    }

    #[test]
    fn percentile_y_axis_covers_limit() {
        let a = uniform_us(1000, 1);
        let svg = percentile_svg(
            "t",
            &[Series {
                label: "a",
                hist: &a,
            }],
            Some(("budget", 3_000_000)),
        );
        let doc = parse(&svg);
        let ticks: Vec<f64> = y_ticks(&doc).iter().map(|t| t.0).collect();
        assert_eq!(ticks[0], 0.0);
        assert!(*ticks.last().unwrap() >= 3.0, "{ticks:?}");
        assert_nice(&ticks);
        let limit = &with_class(&doc, "limit")[0];
        let py = attr(limit, "y1");
        assert!((Y0..=Y1).contains(&py));
        assert!((ms_at(&doc, py) - 3.0).abs() < 0.01);
        assert_eq!(attr(limit, "y2"), py);
        assert!(limit.attribute("stroke-dasharray").is_some());
        assert_eq!(
            with_class(&doc, "limit-label")[0].text(),
            Some("budget 3.000 ms")
        );
        // Limit below the data: the axis still covers the data maximum.
        let svg = percentile_svg(
            "t",
            &[Series {
                label: "a",
                hist: &a,
            }],
            Some(("d", 100_000)),
        );
        let doc = parse(&svg);
        assert!(y_ticks(&doc).last().unwrap().0 >= 1.0);
    }

    #[test]
    fn percentile_empty_inputs_parse() {
        let empty = LatencyHistogram::new();
        let svg = percentile_svg(
            "empty",
            &[Series {
                label: "x",
                hist: &empty,
            }],
            None,
        );
        let doc = parse(&svg);
        assert!(with_class(&doc, "series").is_empty());
        assert_eq!(
            with_class(&doc, "legend")[0].text(),
            Some("x: (no samples)")
        );
        assert_nice(&y_ticks(&doc).iter().map(|t| t.0).collect::<Vec<_>>());

        let svg = percentile_svg("none", &[], Some(("deadline", 0)));
        let doc = parse(&svg);
        assert!(with_class(&doc, "series").is_empty());
        assert_eq!(with_class(&doc, "note")[0].text(), Some("no series"));
    }

    #[test]
    fn hostile_text_is_escaped() {
        let hostile = "a<b & \"c\" 'd' ]]> </svg> <!-- \u{1}\u{FFFF} \u{2192}";
        let expected = "a<b & \"c\" 'd' ]]> </svg> <!-- \u{FFFD}\u{FFFD} \u{2192}";
        let a = uniform_us(10, 1);
        let svg = percentile_svg(
            hostile,
            &[Series {
                label: hostile,
                hist: &a,
            }],
            Some((hostile, 5_000_000)),
        );
        let doc = parse(&svg);
        assert_eq!(with_class(&doc, "title")[0].text(), Some(expected));
        assert!(with_class(&doc, "legend")[0]
            .text()
            .unwrap()
            .starts_with(&format!("{expected}: P50")));
        assert_eq!(
            with_class(&doc, "limit-label")[0].text().unwrap(),
            format!("{expected} 5.000 ms")
        );

        let frames = [TimelineFrame {
            frame: 3,
            latency_ns: 1,
            fallback: true,
        }];
        let marks = [ModeMark {
            after_frame: 3,
            label: hostile.to_owned(),
        }];
        let svg = timeline_svg(hostile, &frames, 10, &marks);
        let doc = parse(&svg);
        assert_eq!(with_class(&doc, "title")[0].text(), Some(expected));
        assert_eq!(with_class(&doc, "mode-label")[0].text(), Some(expected));
    }

    fn frames_with_spike(n: u64, spike_at: u64, spike_ns: u64) -> Vec<TimelineFrame> {
        (0..n)
            .map(|i| TimelineFrame {
                frame: i,
                latency_ns: if i == spike_at {
                    spike_ns
                } else {
                    5_000_000 + (i * 7919 % 97) * 20_000
                },
                fallback: i % 10_000 == 1234,
            })
            .collect()
    }

    #[test]
    fn timeline_100k_frames_is_small_and_keeps_the_spike() {
        let frames = frames_with_spike(100_000, 53_217, 48_000_000);
        let marks = [
            ModeMark {
                after_frame: 20_000,
                label: "nominal \u{2192} reduced".into(),
            },
            ModeMark {
                after_frame: 60_000,
                label: "reduced \u{2192} nominal".into(),
            },
        ];
        let svg = timeline_svg("100k", &frames, 33_333_333, &marks);
        assert!(svg.len() < 1_000_000, "{} bytes", svg.len());
        assert!(svg.len() < 100_000, "{} bytes", svg.len());
        let doc = parse(&svg);
        let pts = points(&with_class(&doc, "latency")[0]);
        assert!(pts.len() <= 2 * (X1 - X0) as usize);
        let top = pts.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert!(
            (ms_at(&doc, top.1) - 48.0).abs() < 0.1,
            "{}",
            ms_at(&doc, top.1)
        );
        // ... at frame 53 217 (x ticks give the frame scale).
        let xt: Vec<(f64, f64)> = with_class(&doc, "xtick")
            .iter()
            .map(|n| (n.text().unwrap().parse().unwrap(), attr(n, "x")))
            .collect();
        let ((f0, x0), (f1, x1)) = (xt[0], xt[xt.len() - 1]);
        let frame = f0 + (top.0 - x0) / (x1 - x0) * (f1 - f0);
        assert!((frame - 53_217.0).abs() < 2.0, "{frame}");
        // The lowest latency survives too (5 ms baseline).
        let bottom = pts.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert!((ms_at(&doc, bottom.1) - 5.0).abs() < 0.1);
        assert_eq!(with_class(&doc, "fallback")[0].children().count(), 10);
        assert_eq!(with_class(&doc, "mode").len(), 2);
        assert!(with_class(&doc, "dots").is_empty());
        assert!(with_class(&doc, "legend")[0]
            .text()
            .unwrap()
            .contains("100000 frames, min/max per pixel column"));
    }

    #[test]
    fn timeline_small_draws_every_frame_fallbacks_marks_and_deadline() {
        let frames: Vec<_> = (100..150)
            .map(|i| TimelineFrame {
                frame: i,
                latency_ns: 1_000_000 + i * 10_000,
                fallback: i % 20 == 0,
            })
            .collect();
        let marks = [
            ModeMark {
                after_frame: 120,
                label: "nominal \u{2192} reduced".into(),
            },
            ModeMark {
                after_frame: 140,
                label: "reduced \u{2192} nominal".into(),
            },
        ];
        let svg = timeline_svg("small", &frames, 33_333_333, &marks);
        let doc = parse(&svg);
        assert_eq!(points(&with_class(&doc, "latency")[0]).len(), 50);
        assert_eq!(with_class(&doc, "dots")[0].children().count(), 50);
        assert_eq!(with_class(&doc, "fallback")[0].children().count(), 3);
        let labels: Vec<_> = with_class(&doc, "mode-label")
            .iter()
            .map(|n| n.text().unwrap())
            .collect();
        assert_eq!(
            labels,
            ["nominal \u{2192} reduced", "reduced \u{2192} nominal"]
        );
        // Mode lines sit between the frames they separate.
        let mode_x = attr(&with_class(&doc, "mode")[0], "x1");
        let pts = points(&with_class(&doc, "latency")[0]);
        assert!(pts[20].0 < mode_x && mode_x < pts[21].0);
        assert_eq!(
            with_class(&doc, "limit-label")[0].text(),
            Some("deadline 33.333 ms")
        );
        // The y axis covers the deadline (data max is only 2.49 ms).
        let yt: Vec<f64> = y_ticks(&doc).iter().map(|t| t.0).collect();
        assert!(*yt.last().unwrap() >= 33.333, "{yt:?}");
        assert_nice(&yt);
        let xt: Vec<f64> = with_class(&doc, "xtick")
            .iter()
            .map(|n| n.text().unwrap().parse().unwrap())
            .collect();
        assert_nice(&xt);
        assert!(xt[0] <= 100.0 && *xt.last().unwrap() >= 149.0, "{xt:?}");
    }

    #[test]
    fn timeline_zero_and_single_frames_parse() {
        let svg = timeline_svg("none", &[], 20_000_000, &[]);
        let doc = parse(&svg);
        assert!(with_class(&doc, "latency").is_empty());
        assert_eq!(with_class(&doc, "note")[0].text(), Some("no frames"));
        assert!(y_ticks(&doc).last().unwrap().0 >= 20.0);

        let marks = [ModeMark {
            after_frame: 7,
            label: "x".into(),
        }];
        let doc_s = timeline_svg("none", &[], 0, &marks);
        let doc = parse(&doc_s);
        assert_eq!(with_class(&doc, "mode").len(), 1);

        let one = [TimelineFrame {
            frame: u64::MAX,
            latency_ns: 0,
            fallback: false,
        }];
        let svg = timeline_svg("one", &one, 0, &[]);
        let doc = parse(&svg);
        assert_eq!(points(&with_class(&doc, "latency")[0]).len(), 1);
        assert_eq!(with_class(&doc, "dots")[0].children().count(), 1);
    }

    #[test]
    fn timeline_sorts_frames_and_merges_marks_in_one_column() {
        let mut frames = frames_with_spike(3000, 10, 9_000_000);
        let sorted = timeline_svg("t", &frames, 1, &[]);
        frames.reverse();
        assert_eq!(timeline_svg("t", &frames, 1, &[]), sorted);

        // 3000 frames over ~800 columns: marks 1 frame apart may straddle a column edge,
        // marks after the same frame never do; one far away gets its own line.
        let mut marks: Vec<_> = (0..4)
            .map(|i| ModeMark {
                after_frame: 1000,
                label: format!("m{i}"),
            })
            .collect();
        marks.push(ModeMark {
            after_frame: 2000,
            label: "far".into(),
        });
        let svg = timeline_svg("t", &frames, 1, &marks);
        let doc = parse(&svg);
        assert_eq!(with_class(&doc, "mode").len(), 2);
        let labels: Vec<_> = with_class(&doc, "mode-label")
            .iter()
            .map(|n| n.text().unwrap())
            .collect();
        assert_eq!(labels, ["m0 (+3)", "far"]);
    }

    #[test]
    fn nice_steps_and_number_formats() {
        for span in [
            1e-6, 3e-4, 0.7, 1.0, 2.5, 7.0, 33.3, 99.9, 1234.0, 1e5, 6e10,
        ] {
            let step = nice_step(span, 8.0);
            assert!(span / step <= 8.0 + 1e-9, "{span} {step}");
            assert!(span / step > 8.0 / 5.0, "{span} {step}");
            assert_nice(&[0.0, step, 2.0 * step]);
            let y = YAxis::covering(span);
            assert!(y.hi >= span * 1.05 - 1e-12 && y.intervals <= 8, "{y:?}");
        }
        assert_eq!(step_decimals(0.5), 1);
        assert_eq!(step_decimals(0.05), 2);
        assert_eq!(step_decimals(1.0), 0);
        assert_eq!(step_decimals(20.0), 0);
        assert_eq!(N(1.0).to_string(), "1");
        assert_eq!(N(1.5).to_string(), "1.5");
        assert_eq!(N(1.234).to_string(), "1.23");
        assert_eq!(N(-0.001).to_string(), "0");
        assert_eq!(N(-2.05).to_string(), "-2.05");
        assert_eq!(fmt_ms(990_207), "0.990");
        assert_eq!(fmt_ms(12_345), "0.0123");
        assert_eq!(fmt_ms(0), "0.000");
        assert_eq!(fmt_ms(1), "0.000001");
    }
}
