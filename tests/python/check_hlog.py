#!/usr/bin/env python3
"""Reads a redline interval log (.hlog) with HdrHistogram_py, HdrHistogram's own Python
implementation (`pip install hdrhistogram`), as a second opinion on the format.

  python3 tests/python/check_hlog.py LOG [--tag end_to_end] [--intervals N] [--samples N]

Prints every interval (tag, samples, P50/P99/max in ms); exits 1 when an interval does not
decode, or when the intervals with --tag are not --intervals many or do not hold --samples
samples in all.
"""
import argparse
import sys

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--tag")
    ap.add_argument("--intervals", type=int)
    ap.add_argument("--samples", type=int)
    a = ap.parse_args()
    reader = HistogramLogReader(a.log, HdrHistogram(1, 60_000_000_000, 3))
    n, samples = 0, 0
    while True:
        h = reader.get_next_interval_histogram()
        if h is None:
            break
        tag = h.get_tag()
        print(f"{tag}: {h.get_total_count()} samples, p50 {h.get_value_at_percentile(50) / 1e6:.3f} ms, "
              f"p99 {h.get_value_at_percentile(99) / 1e6:.3f} ms, max {h.get_max_value() / 1e6:.3f} ms")
        if a.tag is None or tag == a.tag:
            n += 1
            samples += h.get_total_count()
    if a.intervals is not None and n != a.intervals:
        sys.exit(f"{n} intervals tagged {a.tag}, expected {a.intervals}")
    if a.samples is not None and samples != a.samples:
        sys.exit(f"{samples} samples in intervals tagged {a.tag}, expected {a.samples}")
    print(f"ok: {n} intervals, {samples} samples")


if __name__ == "__main__":
    main()
