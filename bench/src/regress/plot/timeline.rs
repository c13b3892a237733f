//! The timeline chart: end-to-end latency frame by frame (one replay), with fallback
//! frames, the deadline and the mode changes.
//!
//! # Contract
//!
//! - [`timeline_svg`] draws per-frame latency against the frame number, fallback frames as
//!   red crosses, a dashed deadline line labelled "deadline X ms" and a vertical line per
//!   mode change, labelled; with no frames it still draws the axes and a "no frames" note.
//!   The y axis covers the data and the deadline (see the `svg` module).
//! - Off the hot path: sorts a copy of its frames and returns a fresh `String`.
//!
//! # Decimation
//!
//! Frames are sorted by frame number and each maps to one 1-px column of the plot area. With
//! at most 2 frames per column on average (n ≤ 2 × columns) every frame is drawn (and, up to 200
//! frames, dotted). Beyond that each column keeps only its lowest- and highest-latency frames,
//! in frame order, so the polyline has at most 2 points per column and every spike (and every
//! dip) stays visible; fallback crosses likewise keep the highest-latency fallback frame of each
//! column, and mode changes falling in the same column share one line whose label gets "(+N)".
//! The file size is thus bounded by the plot width, not the frame count (about 30 KiB for
//! 100k frames).

use std::fmt::Write as _;

use super::svg::{
    fmt_ms, ns_to_ms, text_width, write_points, Doc, Esc, XAxis, YAxis, HEIGHT, N, X0, X1, Y0, Y1,
};
use crate::regress::measurement::TimelineFrame;

/// A mode change, drawn as a vertical line after `after_frame` with its label
/// (e.g. "nominal → reduced").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeMark {
    /// The last frame before the change; the line is drawn half a frame after it.
    pub after_frame: u64,
    /// Label drawn next to the line (any text; escaped on output).
    pub label: String,
}

/// Fallback frames' crosses (red, as the deadline line).
const FALLBACK_COLOUR: &str = "#d62728";
/// Mode change lines and labels.
const MARK_COLOUR: &str = "#7b3294";
/// Up to this many frames, each frame also gets a dot.
const DOT_LIMIT: usize = 200;

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

#[cfg(test)]
mod tests {
    use super::super::svg::read_back::{
        assert_nice, attr, ms_at, parse, points, with_class, y_ticks,
    };
    use super::*;

    #[test]
    fn hostile_text_is_escaped() {
        let hostile = "a<b & \"c\" 'd' ]]> </svg> <!-- \u{1}\u{FFFF} \u{2192}";
        let expected = "a<b & \"c\" 'd' ]]> </svg> <!-- \u{FFFD}\u{FFFD} \u{2192}";
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
}
