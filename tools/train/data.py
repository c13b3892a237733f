"""Reads a dataset written by `redline sim dataset` and builds CenterNet-style targets.

Targets (on the BEV grid, row-major iy * nx + ix, as redline's decoder reads the head):
- heatmap, per class: a Gaussian around each box's centre cell (peak 1 at the cell that
  holds the centre, sigma = max(0.5, sqrt(length * width) / 4) cells), max over boxes;
- box regression at each centre cell: dx, dy (centre minus cell centre, in cells), log
  length, log width (m), sin yaw, cos yaw (ego frame); a mask marks those cells;
- segmentation: the dataset's per-cell class.
"""

import json
import os

import numpy as np
import torch


class Dataset:
    def __init__(self, root, stride, max_drives=None, lifts=(0.5,), sampling="nearest"):
        """`lifts`: the heights (m) whose view-transform tables `taps` stacks, in order
        (`[len(lifts), cells, 4, 2]`: per cell four taps (pixel, weight in 1/256), (-1, 0)
        unused); each must be one the dataset was written with (meta.json `lifts_m`; older
        datasets: `lift_m` alone). `sampling` (redline's `bev_sampling`): "nearest" reads
        the tables `bev_sources_s{S}*.npy` (up to two views of weight 256), "row_linear"
        the tap tables `bev_taps_s{S}*.npy` (written by `redline sim dataset --bev-sampling
        row-linear`)."""
        self.root = root
        self.meta = json.load(open(os.path.join(root, "meta.json")))
        m = self.meta
        if stride not in m["strides"]:
            raise SystemExit(f"{root} has no BEV table for stride {stride}: rerun redline sim dataset --strides {stride}")
        self.bev = m["bev"]
        self.k = m["history"]
        have = [float(h) for h in m.get("lifts_m", [m["lift_m"]])]
        tables = []
        for h in lifts:
            if float(h) not in have:
                want = ",".join(str(v) for v in sorted(set(have) | {float(h)}, reverse=True))
                raise SystemExit(f"{root} has no BEV table for lift height {h} m (it has {have}): rerun redline sim dataset --lifts {want}")
            i = have.index(float(h))
            lift = "" if i == 0 else f"_lift{i}"
            if sampling == "row_linear":
                path = os.path.join(root, f"bev_taps_s{stride}{lift}.npy")
                if not os.path.exists(path):
                    raise SystemExit(f"{root} has no row-linear BEV table {os.path.basename(path)}: rerun redline sim dataset --bev-sampling row-linear (its bev_taps_* files are all that is needed)")
                tables.append(np.load(path).astype(np.int64))
            elif sampling == "nearest":
                src = np.load(os.path.join(root, f"bev_sources_s{stride}{lift}.npy")).astype(np.int64)
                taps = np.full((src.shape[0], 4, 2), -1, dtype=np.int64)
                taps[:, :, 1] = 0
                taps[:, :2, 0] = src
                taps[:, :2, 1] = np.where(src >= 0, 256, 0)
                tables.append(taps)
            else:
                raise SystemExit(f"unknown BEV sampling {sampling!r}: use nearest or row_linear")
        self.taps = np.stack(tables)
        drives = m["drives"][:max_drives] if max_drives else m["drives"]
        self.inputs, self.warps, self.heat, self.reg, self.mask, self.seg, self.boxes = [], [], [], [], [], [], []
        for d in drives:
            p = os.path.join(root, d["dir"])
            # Camera inputs are memory-mapped, not read: a dataset larger than memory
            # (e.g. full-resolution inputs) pages in as batches touch it.
            self.inputs.append(np.load(os.path.join(p, "input.npy"), mmap_mode="r"))
            self.warps.append(torch.from_numpy(np.load(os.path.join(p, "warp.npy"))))
            self.seg.append(torch.from_numpy(np.load(os.path.join(p, "seg.npy")).astype(np.uint8)))
            boxes = np.load(os.path.join(p, "boxes.npy"))
            self.boxes.append(boxes)
            h, r, mk = targets(boxes, self.bev)
            self.heat.append(torch.from_numpy(h))
            self.reg.append(torch.from_numpy(r))
            self.mask.append(torch.from_numpy(mk))
        self.index = [(d, t) for d in range(len(drives)) for t in range(drives[d]["frames"])]

    def batch(self, items):
        """items: list of (drive, frame) -> dict of batched tensors."""
        frames, warp, m, heat, reg, mask, seg = [], [], [], [], [], [], []
        for d, t in items:
            idx = [t] + [max(t - 1 - j, 0) for j in range(self.k)]
            frames.append(torch.from_numpy(np.ascontiguousarray(self.inputs[d][idx])))
            warp.append(self.warps[d][t].long())
            m.append(min(t, self.k))
            heat.append(self.heat[d][t].float())
            reg.append(self.reg[d][t].float())
            mask.append(self.mask[d][t])
            seg.append(self.seg[d][t].long())
        return {
            "frames": torch.stack(frames),
            "warp": torch.stack(warp),
            "m": torch.tensor(m),
            "heat": torch.stack(heat),
            "reg": torch.stack(reg),
            "mask": torch.stack(mask),
            "seg": torch.stack(seg),
        }


def targets(boxes, bev, classes=3):
    f = boxes.shape[0]
    ny, nx, res, x0, y0 = bev["ny"], bev["nx"], bev["res"], bev["x0"], bev["y0"]
    heat = np.zeros((f, classes, ny, nx), np.float16)
    reg = np.zeros((f, 6, ny, nx), np.float16)
    mask = np.zeros((f, ny, nx), np.bool_)
    gy, gx = np.mgrid[0:ny, 0:nx]
    for t in range(f):
        for b in boxes[t]:
            valid, cls, x, y, length, width, yaw, _ = b
            if valid < 0.5 or int(cls) >= classes:
                continue
            ix, iy = int(np.floor((x - x0) / res)), int(np.floor((y - y0) / res))
            if not (0 <= ix < nx and 0 <= iy < ny):
                continue
            sigma = max(0.5, np.sqrt(length * width) / 4.0 / res)
            g = np.exp(-((gx - ix) ** 2 + (gy - iy) ** 2) / (2 * sigma * sigma))
            c = int(cls)
            heat[t, c] = np.maximum(heat[t, c], g.astype(np.float16))
            cx, cy = x0 + (ix + 0.5) * res, y0 + (iy + 0.5) * res
            reg[t, :, iy, ix] = [(x - cx) / res, (y - cy) / res, np.log(length), np.log(width), np.sin(yaw), np.cos(yaw)]
            mask[t, iy, ix] = True
    return heat, reg, mask
