#!/usr/bin/env python3
"""Measures how trustworthy `redline regress` is on this machine (not a CI test).

For baseline mode and for A/B mode it runs:
  1. the same build and config against itself CHECKS times: every failing check is a
     false positive;
  2. a slowdown of P % injected into one stage ([slowdown.STAGE] percent = P) for each P
     of --sweep, SWEEP_CHECKS times each: a check counts as caught when it exits 1 and a
     failing figure names the stage.

Usage (release build first):
  cargo build --release
  python3 tools/regress/noise.py --redline target/release/redline --out /tmp/noise

Re-judge the kept checks with other tolerances (no replays):
  python3 tools/regress/noise.py --analyze /tmp/noise "p50=0.15:20,p99=0.3:100,p99.9=0.5:250,max=1.0:1000"

Every check's verdict.json is kept under --out; summary.json holds the counts and, per
figure, the largest ratio the same-vs-same checks produced (the noise envelope, from
which tolerances can be chosen).
"""
import argparse
import json
import os
import subprocess
import sys
import time


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def verdict(out_dir):
    with open(os.path.join(out_dir, "verdict.json")) as f:
        return json.load(f)


def analyze(out, tolerances):
    """Re-judges every check kept under `out` with other tolerances, e.g.
    "p50=0.15:20,p99=0.3:100,p99.9=0.5:250,max=1.0:1000" (relative:floor_us). Baseline
    checks are re-judged exactly (medians); A/B checks from the median paired ratio and the
    difference of medians (the verdict's rule uses the median paired difference)."""
    tol = {}
    for part in tolerances.split(","):
        name, val = part.split("=")
        rel, floor = val.split(":")
        tol[name] = (float(rel), float(floor) * 1e3)
    results = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name, "verdict.json")
        if not os.path.exists(path) or "-" not in name:
            continue
        v = verdict(os.path.join(out, name))
        group = name.rsplit("-", 1)[0]
        failing = []
        for row in v["rows"]:
            pct = row["figure"].rsplit(" ", 1)[-1]
            if row["unit"] != "nanoseconds" or pct not in tol:
                if not row["pass"]:
                    failing.append(row["figure"])
                continue
            rel, floor = tol[pct]
            ref, now, ratio = row["reference"], row["now"], row["ratio"]
            if v["method"] == "a/b":
                bad = ratio is not None and ratio > 1 + rel and now - ref > floor
            else:
                bad = now > max(ref * (1 + rel), ref + floor)
            if bad:
                failing.append(row["figure"])
        failed = len(failing) > 0
        results.setdefault(group, []).append((failed, failing))
    for group, rs in results.items():
        n_fail = sum(1 for f, _ in rs if f)
        figs = {}
        for _, fl in rs:
            for f in fl:
                figs[f] = figs.get(f, 0) + 1
        print(f"{group}: {n_fail}/{len(rs)} fail; failing figures {dict(sorted(figs.items(), key=lambda kv: -kv[1])[:6])}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--analyze":
        analyze(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redline", default="target/release/redline")
    ap.add_argument("--out", default="/tmp/redline-noise")
    ap.add_argument("--checks", type=int, default=20, help="same-vs-same checks per mode")
    ap.add_argument("--sweep", default="5,10,15,20,30", help="slowdowns to try, percent")
    ap.add_argument("--sweep-checks", type=int, default=5)
    ap.add_argument("--stage", default="backbone")
    ap.add_argument("--frames", type=int, default=150, help="frames per replay")
    ap.add_argument("--reps", type=int, default=0, help="replays per check (0: the config's)")
    ap.add_argument("--config", default="", help="TOML appended to every side's config")
    ap.add_argument("--modes", default="baseline,ab")
    a = ap.parse_args()
    redline = os.path.abspath(a.redline)
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "drive.mcap")
    if not os.path.exists(log):
        seconds = a.frames / 30.0 + 1.0
        r = run([redline, "sim", "generate", "-o", log, "--seconds", str(seconds)])
        if r.returncode != 0:
            sys.exit(r.stderr)

    def config(name, slow_pct):
        path = os.path.join(a.out, name)
        with open(path, "w") as f:
            f.write(a.config + "\n")
            if slow_pct:
                f.write(f"\n[slowdown.{a.stage}]\npercent = {slow_pct}\n")
        return path

    base_cfg = config("base.toml", 0)
    common = [log, "--frames", str(a.frames)] + (["--reps", str(a.reps)] if a.reps else [])
    summary = {"frames": a.frames, "reps": a.reps or "config default", "stage": a.stage, "extra_config": a.config}
    baseline = os.path.join(a.out, "baseline.json")

    def check(mode, name, slow_pct):
        out = os.path.join(a.out, name)
        cfg = config(f"{name}.toml", slow_pct)
        if mode == "baseline":
            cmd = [redline, "regress"] + common + ["--config", cfg, "--baseline", baseline, "--out", out]
        else:
            cmd = [redline, "regress"] + common + ["--config", cfg, "--against", redline,
                                                  "--against-config", base_cfg, "--out", out]
        t = time.time()
        r = run(cmd)
        if r.returncode not in (0, 1):
            sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
        v = verdict(out)
        failing = [row["figure"] for row in v["rows"] if not row["pass"]]
        caught = r.returncode == 1 and any(f.startswith(a.stage + " ") for f in failing)
        print(f"{name}: exit {r.returncode}, {len(failing)} failing {failing[:4]} ({time.time() - t:.0f} s)", flush=True)
        return r.returncode, failing, caught, v

    for mode in a.modes.split(","):
        if mode == "baseline":
            r = run([redline, "regress"] + common + ["--config", base_cfg, "--baseline", baseline,
                                                     "--update-baseline", "--out", os.path.join(a.out, "bl-record")])
            if r.returncode != 0:
                sys.exit(r.stderr)
        fp, envelope = 0, {}
        for i in range(a.checks):
            code, failing, _, v = check(mode, f"{mode}-same-{i}", 0)
            fp += code == 1
            for row in v["rows"]:
                if row["ratio"] is not None:
                    envelope[row["figure"]] = max(envelope.get(row["figure"], 0.0), row["ratio"])
        caught = {}
        for pct in [p for p in a.sweep.split(",") if p]:
            n = 0
            for i in range(a.sweep_checks):
                n += check(mode, f"{mode}-slow{pct}-{i}", float(pct))[2]
            caught[pct] = f"{n}/{a.sweep_checks}"
        summary[mode] = {
            "false_positives": f"{fp}/{a.checks}",
            "caught_by_slowdown_percent": caught,
            "largest_same_vs_same_ratio": dict(sorted(envelope.items(), key=lambda kv: -kv[1])),
        }
        print(json.dumps({k: v for k, v in summary[mode].items() if k != "largest_same_vs_same_ratio"}), flush=True)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
