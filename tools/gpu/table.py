#!/usr/bin/env python3
"""Prints tools/gpu/check.sh's table from the JSON it wrote (bench.jsonl, torch.jsonl)."""
import json
import os
import sys

out = sys.argv[1]


def lines(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if l.strip().startswith("{")]


torch = {r["model"]: r for r in lines("torch.jsonl")}


def model_key(path):
    """The table's name of a model file: its base name, prefixed with the folder for the
    fast model and the extra models (`.gpu/hr/`), whose names repeat the shipped ones."""
    base = os.path.basename(path).replace(".onnx", "")
    for folder in ("fast", "hr"):
        if f"/{folder}/" in path:
            return f"{folder}/{base}"
    return base


rows = {}
extra = []
for r in lines("bench.jsonl"):
    if r.get("label", "").startswith("cuda-staged"):
        sync = r["label"].rsplit("; ", 1)[-1].rstrip(")")
        extra.append((model_key(r["model"]) + ".onnx", sync,
                      (r["p50_ms"], r["p99_ms"]), (r["against_p50_ms"], r["against_p99_ms"]), r["differing_elements"]))
        continue
    key = model_key(r["model"])
    row = rows.setdefault(key, {"macs": r["macs"]})
    row["cuda"] = (r["p50_ms"], r["p99_ms"])
    if r.get("against_engine") == "native":
        row["native"] = (r["against_p50_ms"], r["against_p99_ms"])
        row["diff"] = (r["differing_elements"], r["total_elements"])
    elif r.get("against_engine") == "cuda":
        row["graph"] = (r["p50_ms"], r["p99_ms"])
        row["stream"] = (r["against_p50_ms"], r["against_p99_ms"])
# The shipped backbone takes 6x128x256 since 2026-11-26; the fast model's takes 6x64x128.
peer = {"fast/backbone": "backbone", "backbone": "backbone_full_res", "hr/backbone": "backbone_full_res",
        "det_head": "det_head", "seg_head": "seg_head",
        "resnet18_6x900x1600": "resnet18_6x900x1600"}


def f(t):
    return f"{t[0]:7.3f} {t[1]:7.3f}" if t else "      -       -"


print(f"{'model':20} {'MMAC':>7} | {'native P50/P99 ms':>15} | {'cuda graph':>15} | {'cuda stream':>15} | {'torch fp16 graph':>16} | {'cuda/torch P50 P99':>18} | differing vs native")
for k, r in rows.items():
    t = torch.get(peer.get(k, ""))
    tt = (t["p50_ms"], t["p99_ms"]) if t else None
    # Models benched only against native (the zoo's imports): their cuda run is a graph replay.
    g = r.get("graph") or r.get("cuda")
    ratio = f"{g[0] / tt[0]:8.2f} {g[1] / tt[1]:8.2f}" if (g and tt) else "       -        -"
    d = r.get("diff")
    ds = f"{d[0]}/{d[1]}" if d else "-"
    print(f"{k:20} {r['macs'] / 1e6:7.1f} | {f(r.get('native'))} | {f(g)} | {f(r.get('stream'))} | {f(tt):>16} | {ratio:>18} | {ds}")
    if g and r.get("stream"):
        print(f"{'':20} launch overhead saved by graph replay: P50 {1e3 * (r['stream'][0] - g[0]):.1f} us/run")

if extra:
    print()
    print(f"{'model':28} {'sync':11} | {'cuda-staged P50/P99':>19} | {'cuda (run: host copies)':>23} | differing")
    for name, sync, st, cu, d in extra:
        print(f"{name:28} {sync:11} | {f(st):>19} | {f(cu):>23} | {d}")
