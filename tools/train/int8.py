"""Integer emulation of the INT8 driving network, as redline runs it.

- Convolution: `acc = sum (x - x_zp) * w_q + b_q` (exact, in float64), then
  `y = sat(round_half_even(f32(acc) * m_c) + y_zp)` with the float32 multiplier
  `m_c = f32(f32(x_scale) * f32(w_scale[c])) / f32(y_scale)`: ONNX Runtime's QLinearConv
  requantization, which redline's native engine matches bit for bit. ReLU outputs have
  `y_zp = -128`, so saturation is the clamp.
- BEV view transform: per cell up to four taps of weights `w` (in 1/256; two views of 256
  each at most), `zp + round_half_away(sum w (q - zp) / sum w)`, none `zp` (redline's
  `BevProjector::project`; with nearest sampling two sources average, one is copied).
- Detection head: the position map, if any, concatenated after the BEV channels as int8
  at the features' quantization.
- Temporal fusion: `zp + round_half_away((2 (cur - zp) + sum_j (warped_j - zp)) / (2 + m))`,
  saturated; outside cells add 0 (redline's `TemporalCache::fuse`).
"""

import json
import os

import numpy as np
import torch
import torch.nn.functional as F

import net as N


def round_half_away(x):
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def sat(x):
    return torch.clamp(x, -128, 127)


class QConv:
    def __init__(self, conv, x_q, y_q):
        from export import quant_bias, quant_weights

        wq, ws = quant_weights(conv)
        bq, _ = quant_bias(conv, x_q[0], ws)
        self.w = torch.from_numpy(wq.astype(np.float64))
        self.b = torch.from_numpy(bq.astype(np.float64))
        m = (np.float32(x_q[0]) * ws.astype(np.float32)).astype(np.float32) / np.float32(y_q[0])
        self.m = torch.from_numpy(m.astype(np.float32))
        self.x_zp, self.y_q = x_q[1], y_q
        self.stride, self.pad, self.dil = conv.stride, conv.padding, conv.dilation

    def __call__(self, x):
        """x: int8 values as a float64 NCHW tensor -> same for the output."""
        acc = F.conv2d(x - self.x_zp, self.w, self.b, self.stride, self.pad, self.dil)
        y = torch.round(acc.float() * self.m[None, :, None, None]).double()
        return sat(y + self.y_q[1])


def quantize_pos(pos, q):
    """The position map [P, ny, nx] as int8 at quantization q (QuantizeLinear: half to even)."""
    v = np.round(pos.double().numpy() / q[0]) + q[1]
    return np.clip(v, -128, 127).astype(np.int8)


def dequant(x, q):
    return (x - q[1]) * q[0]


class QuantNet:
    def __init__(self, model, qp, ds):
        self.model, self.qp = model, qp
        def chain(layers, prefix, s):
            """ReLU convolutions with taps `prefix.i` from input quantization `s`."""
            convs = []
            for i, l in enumerate(layers):
                q = qp[f"{prefix}.{i}"]
                convs.append((f"{prefix}.{i}", QConv(l, s, q)))
                s = q
            return convs, s

        self.backbone, self.feat_q = chain(model.backbone.layers, "backbone", (1.0 / 128.0, 0))
        self.det, s = chain(model.det.hidden, "det", self.feat_q)
        self.det_heat = QConv(model.det.heat, s, qp["det.heat"])
        self.det_box = QConv(model.det.box, s, qp["det.box"])
        self.pos = None if model.det.pos is None else torch.from_numpy(quantize_pos(model.det.pos, self.feat_q).astype(np.float64))
        self.seg, s = chain(model.seg.hidden, "seg", self.feat_q)
        self.seg_out = QConv(model.seg.out, s, qp["seg.out"])
        taps = torch.as_tensor(ds.taps, dtype=torch.long)  # [lifts, cells, 4, 2]
        self.src, self.w = taps[..., 0], taps[..., 1]
        self.ny, self.nx = ds.bev["ny"], ds.bev["nx"]

    def features(self, images, taps=None):
        """int8 [cams, H, W, 3] -> int8 [cams, C, fh, fw] (float64 values)."""
        x = images.permute(0, 3, 1, 2).double()
        for name, c in self.backbone:
            x = c(x)
            if taps is not None:
                taps[name] = dequant(x, c.y_q)
        return x

    def project(self, feats):
        cams, c, fh, fw = feats.shape
        zp = self.feat_q[1]
        flat = feats.permute(0, 2, 3, 1).reshape(cams * fh * fw, c) - zp
        flat = torch.cat([flat, flat.new_zeros(1, c)], 0)
        n = cams * fh * fw
        maps = []
        for src, w in zip(self.src, self.w):  # one table per lift height, channels concatenated
            acc = 0
            for t in range(src.shape[1]):
                s = src[:, t]
                acc = acc + flat[torch.where(s >= 0, s, torch.full_like(s, n))] * w[:, t, None].double()
            wsum = w.sum(1, keepdim=True).clamp(min=1).double()
            maps.append(round_half_away(acc / wsum))
        v = torch.cat(maps, 1)
        return (v + zp).T.reshape(c * len(maps), self.ny, self.nx)

    def fuse(self, cur, hist, warp, m):
        zp = self.feat_q[1]
        c = cur.shape[0]
        cells = self.ny * self.nx
        if m == 0:
            return cur
        acc = 2 * (cur.reshape(c, cells) - zp)
        for j in range(m):
            h = torch.cat([hist[j].reshape(c, cells) - zp, cur.new_zeros(c, 1)], 1)
            w = warp[j]
            acc = acc + h[:, torch.where(w >= 0, w, torch.full_like(w, cells))]
        return sat(zp + round_half_away(acc / (2 + m))).reshape(c, self.ny, self.nx)

    def heads(self, bev, taps=None):
        x = bev[None] if self.pos is None else torch.cat([bev, self.pos])[None]
        for name, c in self.det:
            x = c(x)
            if taps is not None:
                taps[name] = dequant(x, c.y_q)
        heat, box = self.det_heat(x), self.det_box(x)
        y = bev[None]
        for name, c in self.seg:
            y = c(y)
            if taps is not None:
                taps[name] = dequant(y, c.y_q)
        logits = self.seg_out(y)
        if taps is not None:
            taps["det.heat"] = dequant(heat, self.det_heat.y_q)
            taps["det.box"] = dequant(box, self.det_box.y_q)
            taps["seg.out"] = dequant(logits, self.seg_out.y_q)
        return heat[0], box[0], logits[0]

    def frame(self, b, i, taps=None):
        """Sample i of a batch from data.Dataset.batch -> (fused BEV, heat, box, logits)."""
        m = int(b["m"][i])
        cur = self.project(self.features(b["frames"][i, 0], taps))
        hist = [self.project(self.features(b["frames"][i, 1 + j])) for j in range(m)]
        fused = self.fuse(cur, hist, b["warp"][i], m)
        return (fused,) + self.heads(fused, taps)

    def sqnr(self, ds, frames):
        """Per-layer SQNR (dB) of the integer network against the float one. The heatmap's
        is measured on scores (sigmoid of the logits), what the decoder reads: its int8
        range clips the background's very negative logits on purpose (export.py)."""
        num, den = {}, {}
        model = self.model
        with torch.no_grad():
            for d, t in frames:
                b = ds.batch([(d, t)])
                qt, ft = {}, {}
                self.frame(b, 0, qt)
                model(b["frames"], b["warp"], b["m"], ft)
                for k in qt:
                    r, q = ft[k].double().reshape(qt[k].shape), qt[k]
                    if k == "det.heat":
                        r, q = torch.sigmoid(r), torch.sigmoid(q)
                    num[k] = num.get(k, 0.0) + (r**2).sum().item()
                    den[k] = den.get(k, 0.0) + ((r - q) ** 2).sum().item()
        return {k: (10 * np.log10(num[k] / den[k]) if den[k] > 0 else float("inf")) for k in num}

    def write_fixtures(self, ds, item, out):
        """One frame: each model's int8 input and the emulation's int8 outputs (NHWC)."""
        os.makedirs(out, exist_ok=True)
        b = ds.batch([item])
        fused, heat, box, logits = self.frame(b, 0)
        feats = self.features(b["frames"][0, 0])
        nhwc = lambda t: t.permute(0, 2, 3, 1) if t.dim() == 4 else t.permute(1, 2, 0)  # noqa: E731
        files = {
            "backbone.input.bin": b["frames"][0, 0],
            "backbone.features.bin": nhwc(feats),
            # The view transform alone (before temporal fusion): [ny, nx, lifts * C].
            "bev.projected.bin": nhwc(self.project(feats)),
            "heads.input.bin": nhwc(fused),
            "det_head.heatmap.bin": nhwc(heat),
            "det_head.boxes.bin": nhwc(box),
            "seg_head.logits.bin": nhwc(logits),
        }
        # The float network on the same int8 inputs (what the float ONNX models compute
        # before their int8 output quantization), float32: camera 0's features, the heads.
        with torch.no_grad():
            m = self.model
            img = b["frames"][0, 0, :1].permute(0, 3, 1, 2).float() / 128.0
            ffeat = m.backbone(img)
            bev = dequant(fused, self.feat_q).float()[None]
            fheat, fbox = m.det(bev)
            flog = m.seg(bev)
        for name, t in {
            "float.backbone.features.f32": nhwc(ffeat),
            "float.det_head.heatmap.f32": nhwc(fheat),
            "float.det_head.boxes.f32": nhwc(fbox),
            "float.seg_head.logits.f32": nhwc(flog),
        }.items():
            t.contiguous().numpy().astype("<f4").tofile(os.path.join(out, name))
        manifest = {}
        for name, t in files.items():
            arr = t.contiguous().numpy().astype(np.int8)
            arr.tofile(os.path.join(out, name))
            manifest[name] = list(arr.shape)
        manifest["frame"] = {"drive": ds.meta["drives"][item[0]]["dir"], "t": item[1]}
        with open(os.path.join(out, "fixtures.json"), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
