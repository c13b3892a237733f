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
rows = {}
for r in lines("bench.jsonl"):
    name = r["model"]
    key = "hr/backbone" if "/hr/" in name else os.path.basename(name).replace(".onnx", "")
    row = rows.setdefault(key, {"macs": r["macs"]})
    row["cuda"] = (r["p50_ms"], r["p99_ms"])
    if r.get("against_engine") == "native":
        row["native"] = (r["against_p50_ms"], r["against_p99_ms"])
        row["diff"] = (r["differing_elements"], r["total_elements"])
    elif r.get("against_engine") == "cuda":
        row["graph"] = (r["p50_ms"], r["p99_ms"])
        row["stream"] = (r["against_p50_ms"], r["against_p99_ms"])
peer = {"backbone": "backbone", "hr/backbone": "backbone_full_res", "det_head": "det_head", "seg_head": "seg_head"}


def f(t):
    return f"{t[0]:7.3f} {t[1]:7.3f}" if t else "      -       -"


print(f"{'model':12} {'MMAC':>7} | {'native P50/P99 ms':>15} | {'cuda graph':>15} | {'cuda stream':>15} | {'torch fp16 graph':>16} | {'cuda/torch P50 P99':>18} | differing vs native")
for k, r in rows.items():
    t = torch.get(peer.get(k, ""))
    tt = (t["p50_ms"], t["p99_ms"]) if t else None
    g = r.get("graph")
    ratio = f"{g[0] / tt[0]:8.2f} {g[1] / tt[1]:8.2f}" if (g and tt) else "       -        -"
    d = r.get("diff")
    ds = f"{d[0]}/{d[1]}" if d else "-"
    print(f"{k:12} {r['macs'] / 1e6:7.1f} | {f(r.get('native'))} | {f(g)} | {f(r.get('stream'))} | {f(tt):>16} | {ratio:>18} | {ds}")
    if g and r.get("stream"):
        print(f"{'':12} launch overhead saved by graph replay: P50 {1e3 * (r['stream'][0] - g[0]):.1f} us/run")
