//! The percentile chart: HdrHistogram-style latency distributions, one curve per
//! histogram (e.g. reference and now overlaid), with an optional limit line (the deadline
//! or a stage's budget).
//!
//! # Contract
//!
//! - [`percentile_svg`] draws one polyline per non-empty series (distinct colours), a
//!   legend with each series' P50/P99/max in ms, empty series listed as "(no samples)"
//!   without a curve, and an optional dashed horizontal limit line labelled with its
//!   value. The y axis covers the data and the limit (see the `svg` module).
//! - Off the hot path: allocates and scans whole histograms. Call it after a run.
//!
//! # x axis
//!
//! A percentile p (0 ≤ p < 1) is drawn at x = log10(1 / (1 − p)), linear in that quantity:
//! 0 % → 0, 90 % → 1, 99 % → 2, 99.9 % → 3, 99.99 % → 4, 99.999 % → 5 (the right edge; those
//! six are the ticks). Each curve samples `value_at_quantile` at one point every 2 px; its last
//! point, on the right edge, is the maximum (p = 100 % has no finite position, so everything past
//! 99.999 % is folded onto the edge). Values are hdrhistogram's bucket values (within 0.1 %).

use redline_runtime::det_math as dm;
use std::fmt::Write as _;

use redline_runtime::metrics::LatencyHistogram;

use super::svg::{
    colour, drop_flat_interior, fmt_ms, ns_to_ms, text_width, write_points, Doc, Esc, YAxis,
    GRID_COLOUR, N, X0, X1, Y0, Y1,
};

/// One curve on a percentile plot.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Legend label (any text; escaped on output).
    pub label: &'a str,
    /// Latencies in nanoseconds.
    pub hist: &'a LatencyHistogram,
}

/// Decades of 1/(1-p) on the percentile plot's x axis (0 % .. 99.999 %).
const DECADES: f64 = 5.0;
/// The x axis ticks: (decade, label).
const PERCENTILE_TICKS: [(f64, &str); 6] = [
    (0.0, "0%"),
    (1.0, "90%"),
    (2.0, "99%"),
    (3.0, "99.9%"),
    (4.0, "99.99%"),
    (5.0, "99.999%"),
];

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
                1.0 - dm::powf(10f64, -decade)
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

/// Pixel column of `decade` = log10(1/(1-p)) on the percentile plot.
fn decade_px(decade: f64) -> f64 {
    X0 + decade / DECADES * (X1 - X0)
}

#[cfg(test)]
mod tests {
    use super::super::svg::read_back::{
        assert_nice, attr, ms_at, parse, points, with_class, y_ticks,
    };
    use super::*;

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
    }
}
