#!/usr/bin/env python3
"""Trains the driving network (net.py) on a dataset written by `redline sim dataset`.

Usage: python3 tools/train/train.py DATA -o CKPT [--epochs N] [--batch B] [--seed S]
                                    [--resume CKPT] [--save-every N]

Fixed seeds (torch, sampling order); single process, `torch.set_num_threads` = the
machine's cores. Prints the losses as it goes; writes the float checkpoint (state dict and
the settings) to CKPT every --save-every steps and at the end.

Beside it, CKPT.resume holds what training needs to go on (optimizer state, the next step,
the sampling order and RNG states, the arguments; CKPT itself stays a plain weights file):
`--resume CKPT` continues a run that was stopped (killed, or --stop-at) from its last
checkpoint, with the same schedule, and ends with the same weights as a run that was never
stopped. A run longer than one sitting (the shipped model's takes 1.5-2.25 h on 2 cores)
can be split.
"""

import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as D  # noqa: E402
import net as N  # noqa: E402


def focal_loss(logits, target, cell_weight):
    """CenterNet's penalty-reduced focal loss, normalised by the number of peaks; each BEV
    cell's terms scaled by `cell_weight` (ny x nx; all ones leaves the loss bit for bit)."""
    p = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    pos = target >= 0.999
    neg = ~pos
    pos_loss = (-((1 - p) ** 2 * torch.log(p)) * cell_weight)[pos].sum()
    neg_loss = (-(((1 - target) ** 4) * p**2 * torch.log(1 - p)) * cell_weight)[neg].sum()
    return (pos_loss + neg_loss) / pos.sum().clamp(min=1)


def range_weight(bev, far_weight, start=30.0, full=50.0):
    """1 near the ego, rising linearly to 1 + far_weight between `start` and `full` metres of
    range (BEV cell centres): the far objects, whose heat peaks smear along their camera ray,
    count more in the heatmap loss. far_weight 0: all ones."""
    ys = bev["y0"] + (torch.arange(bev["ny"], dtype=torch.float32) + 0.5) * bev["res"]
    xs = bev["x0"] + (torch.arange(bev["nx"], dtype=torch.float32) + 0.5) * bev["res"]
    r = torch.sqrt(ys[:, None] ** 2 + xs[None, :] ** 2)
    return 1.0 + far_weight * ((r - start) / (full - start)).clamp(0.0, 1.0)


def losses(model, b, seg_weight, cell_weight):
    heat, box, seg = model(b["frames"], b["warp"], b["m"])
    l_heat = focal_loss(heat, b["heat"], cell_weight)
    mask = b["mask"][:, None].expand_as(box)
    l_box = F.l1_loss(box[mask], b["reg"][mask], reduction="sum") / b["mask"].sum().clamp(min=1)
    l_seg = F.cross_entropy(seg, b["seg"], weight=seg_weight)
    return l_heat, l_box, l_seg


def init_from(model, state):
    """Loads `state` into `model`; a convolution weight with more input channels in the model
    (the position channels of "dilated_pos" over "dilated", the second lift height's
    features of "dilated_pos_r2z" over "dilated_pos_r2") gets zeros for the new channels,
    inserted after the first FEAT_C (the heads' first convolution reads the first lift
    height's features, then any further heights', then the position channels), so training
    starts from the checkpoint's outputs."""
    own = model.state_dict()
    for k, v in state.items():
        if k not in own:
            raise SystemExit(f"--init: {k} is not in the {N.ARCH} model")
        w = own[k]
        if w.shape == v.shape:
            w.copy_(v)
        elif w.dim() == 4 and w.shape[0] == v.shape[0] and w.shape[2:] == v.shape[2:] and w.shape[1] > v.shape[1]:
            w.zero_()
            c, extra = N.FEAT_C, w.shape[1] - v.shape[1]
            w[:, :c].copy_(v[:, :c])
            w[:, c + extra :].copy_(v[:, c:])
            print(f"--init: {k} {tuple(v.shape)} -> {tuple(w.shape)}, new input channels zero", flush=True)
        else:
            raise SystemExit(f"--init: {k} has shape {tuple(v.shape)}, the {N.ARCH} model needs {tuple(w.shape)}")
    model.load_state_dict(own)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--epochs", type=float, default=6.5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--frame-step", type=int, default=2, help="use every Nth frame per epoch")
    ap.add_argument("--max-drives", type=int, default=None)
    ap.add_argument("--init", default=None, help="start from this checkpoint")
    ap.add_argument("--arch", default="dilated", choices=sorted(N.ARCHS))
    ap.add_argument("--stop-at", type=int, default=None, help="stop after this many steps (the schedule is still that of --epochs)")
    ap.add_argument("--resume", default=None, help="go on from this checkpoint's step, with its optimizer, order and RNG states and its training arguments")
    ap.add_argument("--far-weight", type=float, default=0.0, help="heatmap loss weight added beyond 30 m of range, reaching its full value at 50 m (0: every cell alike)")
    ap.add_argument("--save-every", type=int, default=500, help="write the checkpoint every N steps")
    a = ap.parse_args()
    resume = None
    if a.resume:
        path = a.resume + ".resume"
        if not os.path.exists(path):
            raise SystemExit(f"--resume: {path} does not exist (the checkpoint was written before --resume existed, or by another tool): start from its weights with --init instead")
        # Our own file: it holds Python RNG states, which the weights-only loader refuses.
        resume = torch.load(path, weights_only=False)
        # The schedule and data come from the stopped run; only where to write, when to stop
        # and how often to save may change.
        keep = {"output": a.output, "stop_at": a.stop_at, "save_every": a.save_every, "data": a.data}
        a = argparse.Namespace(**{**resume["args"], **keep, "resume": a.resume, "init": None})

    N.set_arch(a.arch)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.time()
    ds = D.Dataset(a.data, N.STRIDE, a.max_drives, lifts=N.LIFTS, sampling=N.SAMPLING)
    print(f"loaded {len(ds.index)} frames from {len(ds.inputs)} drives in {time.time() - t0:.0f} s", flush=True)
    model = N.DrivingNet(ds.taps, ds.bev)
    if a.init:
        init_from(model, torch.load(a.init)["state"])
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-4)
    seg_weight = torch.tensor([1.0, 1.0, 2.0])
    cell_weight = range_weight(ds.bev, a.far_weight)
    rng = random.Random(a.seed)
    per_epoch = len(ds.index) // a.frame_step
    steps = int(a.epochs * per_epoch / a.batch)
    print(f"{steps} steps of {a.batch} frames ({a.epochs} epochs of {per_epoch} frames)", flush=True)
    order = []
    run = [0.0, 0.0, 0.0]
    first = 0
    if resume is not None:
        model.load_state_dict(torch.load(a.resume)["state"])
        opt.load_state_dict(resume["opt"])
        first, order, run = resume["step"], list(resume["order"]), list(resume["run"])
        rng.setstate(resume["rng"])
        random.setstate(resume["random"])
        torch.set_rng_state(resume["torch_rng"])
        print(f"resuming {a.resume} at step {first}", flush=True)

    def save():
        torch.save({"state": model.state_dict(), "stride": N.STRIDE, "arch": a.arch}, a.output)
        torch.save(
            {
                "step": step + 1,
                "opt": opt.state_dict(),
                "order": order,
                "run": run,
                "rng": rng.getstate(),
                "random": random.getstate(),
                "torch_rng": torch.get_rng_state(),
                "args": {k: v for k, v in vars(a).items() if k != "resume"},
            },
            a.output + ".resume",
        )

    t0 = time.time()
    step = first - 1
    for step in range(first, min(steps, a.stop_at or steps)):
        if len(order) < a.batch:
            order = rng.sample(ds.index, len(ds.index))[:per_epoch]
        items, order = order[: a.batch], order[a.batch :]
        lr = a.lr * 0.5 * (1 + math.cos(math.pi * step / steps)) if step > 50 else a.lr * (step + 1) / 51
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        lh, lb, ls = losses(model, ds.batch(items), seg_weight, cell_weight)
        loss = lh + lb + ls
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        run = [0.98 * r + 0.02 * v.item() for r, v in zip(run, (lh, lb, ls))] if step else [lh.item(), lb.item(), ls.item()]
        if step % 50 == 0 or step == steps - 1:
            el = time.time() - t0
            print(
                f"step {step}/{steps}  heat {run[0]:.3f}  box {run[1]:.3f}  seg {run[2]:.3f}  lr {lr:.2e}  "
                f"{el:.0f} s (eta {el / (step + 1) * (steps - step - 1):.0f} s)",
                flush=True,
            )
        if step % a.save_every == a.save_every - 1:
            save()
    save()
    print(f"wrote {a.output} at step {step + 1} of {steps} after {time.time() - t0:.0f} s of training", flush=True)


if __name__ == "__main__":
    main()
