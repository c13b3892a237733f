//! The SVG toolkit the charts share: the page and plot-area geometry, the document
//! (background, title, frame, axis titles, limit lines, notes), linear latency and frame
//! axes with "nice" ticks, polylines, number formats and XML escaping.
//!
//! # Contract
//!
//! - Every document is a complete, standalone SVG 1.1 file of 900 × 500 px with one plot
//!   area ([`X0`]..[`X1`] × [`Y0`]..[`Y1`]).
//! - Latency axes are in ms, linear from 0 up to a "nice" bound (a multiple of the tick
//!   step) at least 5 % above the value they must cover; every tick step, on every axis
//!   with numeric ticks, is 1, 2 or 5 × 10^k.
//! - All text is XML-escaped ([`Esc`]); characters that XML 1.0 forbids (control
//!   characters other than tab, newline and carriage return, U+FFFE, U+FFFF) become
//!   U+FFFD. Coordinates are printed with at most 2 decimals ([`N`]) to keep files small.
//! - Off the hot path: everything here appends to a growing `String`.

use redline_runtime::det_math as dm;
use std::fmt::{self, Write as _};

pub(super) const WIDTH: f64 = 900.0;
pub(super) const HEIGHT: f64 = 500.0;
/// Plot area: left, right, top and bottom edges in px.
pub(super) const X0: f64 = 72.0;
pub(super) const X1: f64 = WIDTH - 40.0;
pub(super) const Y0: f64 = 44.0;
pub(super) const Y1: f64 = HEIGHT - 76.0;

/// Series colours (no red: red is for limits and fallbacks).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
];
const LIMIT_COLOUR: &str = "#d62728";
pub(super) const GRID_COLOUR: &str = "#e3e3e3";

/// The SVG document being written.
pub(super) struct Doc {
    /// The document so far.
    pub(super) s: String,
}

impl Doc {
    /// Opens the document and draws the background and the title.
    pub(super) fn new(title: &str) -> Self {
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
    pub(super) fn axis_titles(&mut self, x_title: &str) {
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
    pub(super) fn limit_line(&mut self, y: &YAxis, label: &str, ns: u64) {
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
    pub(super) fn note(&mut self, text: &str) {
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
    pub(super) fn finish(mut self) -> String {
        self.s.push_str("</svg>\n");
        self.s
    }
}

/// A linear latency axis in ms from 0 to `hi`, ticks every `step`.
#[derive(Debug, Clone, Copy)]
pub(super) struct YAxis {
    hi: f64,
    step: f64,
    intervals: u32,
}

impl YAxis {
    /// An axis whose top is at least 5 % above `max_ms` (1 ms when `max_ms` is 0).
    pub(super) fn covering(max_ms: f64) -> Self {
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
    pub(super) fn px(&self, ms: f64) -> f64 {
        Y1 - ms / self.hi * (Y1 - Y0)
    }

    /// Grid lines and tick labels.
    pub(super) fn draw(&self, s: &mut String) {
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
pub(super) struct XAxis {
    lo: f64,
    hi: f64,
    step: f64,
}

impl XAxis {
    /// An axis covering frames `lo..=hi`, extended to multiples of the tick step.
    pub(super) fn covering(lo: u64, hi: u64) -> Self {
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
    pub(super) fn px(&self, f: f64) -> f64 {
        let span = self.hi - self.lo;
        if span > 0.0 {
            X0 + (f - self.lo) / span * (X1 - X0)
        } else {
            // Frame numbers near u64::MAX: f64 cannot tell lo from hi.
            (X0 + X1) / 2.0
        }
    }

    /// Grid lines and tick labels.
    pub(super) fn draw(&self, s: &mut String) {
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
pub(super) fn nice_step(span: f64, max_intervals: f64) -> f64 {
    let raw = (span / max_intervals).max(1e-12);
    let base = dm::powf(10f64, dm::log10(raw).floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * base)
        .find(|step| *step >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * base)
}

/// Decimals needed to print multiples of `step` exactly (step = 1, 2 or 5 × 10^k).
pub(super) fn step_decimals(step: f64) -> usize {
    (-dm::log10(step) - 1e-9).ceil().max(0.0) as usize
}

/// Nanoseconds as milliseconds.
pub(super) fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Formats nanoseconds as milliseconds: 3 decimals, more (up to 6) below 0.1 ms so that
/// about 3 significant digits remain.
pub(super) fn fmt_ms(ns: u64) -> String {
    let ms = ns_to_ms(ns);
    let decimals = if ms == 0.0 || ms >= 0.1 {
        3
    } else {
        (2.0 - dm::log10(ms).floor()).clamp(3.0, 6.0) as usize
    };
    format!("{ms:.decimals$}")
}

/// Estimated width in px of `chars` characters at font-size 12.
pub(super) fn text_width(chars: usize) -> f64 {
    chars as f64 * 6.6
}

pub(super) fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Drops the interior points of horizontal runs (same printed y), which draw nothing.
pub(super) fn drop_flat_interior(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
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

pub(super) fn write_points(s: &mut String, pts: &[(f64, f64)]) {
    for (i, (px, py)) in pts.iter().enumerate() {
        let sep = if i == 0 { "" } else { " " };
        let _ = write!(s, "{sep}{},{}", N(*px), N(*py));
    }
}

/// A coordinate printed with at most 2 decimals, trailing zeros dropped.
pub(super) struct N(pub(super) f64);

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
pub(super) struct Esc<'a>(pub(super) &'a str);

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

/// Reading a chart back in tests: parse it as XML and find elements, ticks and values.
#[cfg(test)]
pub(super) mod read_back {
    pub(in crate::regress::plot) fn parse(svg: &str) -> roxmltree::Document<'_> {
        match roxmltree::Document::parse(svg) {
            Ok(doc) => doc,
            Err(e) => panic!("invalid XML: {e}\n{svg}"),
        }
    }

    pub(in crate::regress::plot) fn with_class<'a, 'i>(
        doc: &'a roxmltree::Document<'i>,
        class: &str,
    ) -> Vec<roxmltree::Node<'a, 'i>> {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(class))
            .collect()
    }

    pub(in crate::regress::plot) fn attr(n: &roxmltree::Node<'_, '_>, name: &str) -> f64 {
        n.attribute(name).unwrap().parse().unwrap()
    }

    pub(in crate::regress::plot) fn points(n: &roxmltree::Node<'_, '_>) -> Vec<(f64, f64)> {
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
    pub(in crate::regress::plot) fn y_ticks(doc: &roxmltree::Document<'_>) -> Vec<(f64, f64)> {
        with_class(doc, "ytick")
            .iter()
            .map(|n| (n.text().unwrap().parse().unwrap(), attr(n, "y") - 4.0))
            .collect()
    }

    /// Maps a pixel row back to ms using the first and last y tick of the document.
    pub(in crate::regress::plot) fn ms_at(doc: &roxmltree::Document<'_>, py: f64) -> f64 {
        let t = y_ticks(doc);
        let ((v0, y0), (v1, y1)) = (t[0], t[t.len() - 1]);
        v0 + (py - y0) / (y1 - y0) * (v1 - v0)
    }

    /// Asserts that tick values start at `first`, are evenly spaced and that the spacing is
    /// 1, 2 or 5 × 10^k; returns the step.
    pub(in crate::regress::plot) fn assert_nice(values: &[f64]) -> f64 {
        assert!(values.len() >= 3, "{values:?}");
        let step = values[1] - values[0];
        for w in values.windows(2) {
            assert!((w[1] - w[0] - step).abs() < step * 1e-6, "{values:?}");
        }
        let m = step
            / redline_runtime::det_math::powf(
                10f64,
                redline_runtime::det_math::log10(step).floor(),
            );
        assert!(
            [1.0, 2.0, 5.0, 10.0].iter().any(|n| (m - n).abs() < 1e-6),
            "step {step} of {values:?} is not 1/2/5 x 10^k"
        );
        step
    }
}

#[cfg(test)]
mod tests {
    use super::read_back::assert_nice;
    use super::*;

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
