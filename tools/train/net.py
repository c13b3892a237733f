"""The driving network in PyTorch, computing what redline computes.

Layout (all activations float here; the INT8 model is these layers with per-channel INT8
weights and per-tensor INT8 activations, see export.py):

- backbone, shared over cameras, on the preprocessed input `q / 128` (q = pixel - 128):
  `BACKBONE` convolutions with ReLU, feature stride `STRIDE_X` x `STRIDE_Y` (4 x 4, or
  4 x 2 in "dilated_pos_r2"): 64x128 -> 16x32xC.
- BEV view transform: redline's table (`bev_sources_s{STRIDE}.npy`, exported by
  `redline sim dataset`): each BEV cell averages its (up to) two feature pixels; none -> 0.
- temporal fusion: redline's warp tables (`warp.npy`): fused = (2 * cur + sum_j warped_j)
  / (2 + m), m = history maps available, a warped cell outside the old grid contributes 0.
- detection head on the fused BEV grid: in "dilated_pos" the grid first gets three
  constant position channels (CoordConv-style, `position_map`); then 3x3 convs, then
  1x1 -> `classes` heatmap logits and 1x1 -> 6 box channels (dx, dy in cells from the
  cell centre, log length, log width, sin yaw, cos yaw); segmentation head: 3x3 conv,
  1x1 -> 3 logits.

Tensors are NCHW inside PyTorch; the ONNX models are NHWC at their boundaries, as redline's
model contract says (export.py).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

# The feature stride's name (the dataset's table `bev_sources_s{STRIDE}.npy`): 4, or "4x2"
# (width stride 4, height stride 2); STRIDE_X, STRIDE_Y are its two strides.
STRIDE = 4
STRIDE_X, STRIDE_Y = 4, 4
FEAT_C = 32
# (in, out, kernel, stride, dilation) of the backbone convolutions, each followed by ReLU.
# Architectures: (in, out, kernel, stride, dilation) of the backbone convolutions and
# (in, out, kernel, dilation) of the heads' hidden convolutions, each followed by ReLU.
# "dilated" is the shipped default (the native engine runs its dilated convolutions on the
# dense kernels, as dilation phases); "small" is an older, smaller model (six
# convolutions; no longer shipped, kept for comparison).
ARCHS = {
    "small": {
        "backbone": [
            (3, 16, 3, 2, 1),
            (16, 24, 3, 1, 1),
            (24, 32, 3, 2, 1),
            (32, 32, 3, 1, 1),
            (32, 32, 3, 1, 2),
            (32, FEAT_C, 3, 1, 1),
        ],
        "det": [(FEAT_C, 48, 3, 1), (48, 48, 3, 1)],
        "seg": [(FEAT_C, 24, 3, 1)],
    },
    "dilated": {
        "backbone": [
            (3, 16, 3, 2, 1),
            (16, 32, 3, 1, 1),
            (32, 48, 3, 2, 1),
            (48, 48, 3, 1, 1),
            (48, 48, 3, 1, 2),
            (48, 48, 3, 1, 4),
            (48, FEAT_C, 3, 1, 1),
        ],
        "det": [(FEAT_C, 48, 3, 1), (48, 48, 3, 1), (48, 48, 3, 2)],
        "seg": [(FEAT_C, 32, 3, 1), (32, 32, 3, 2)],
    },
}
# "dilated_pos": "dilated" whose detection head also sees where each BEV cell is. The view
# transform gives every cell along a camera ray the same feature pixel (beyond ~28 m ahead
# two feature rows cover all of it), so without position the head cannot tell 30 m from 60 m
# however well the features encode distance (apparent size); with it, it can match the two.
# Shipped, fine-tuned from the "dilated" model at the full 128x256 input (3 500 steps, lr
# 1e-3): validation mAP 0.581 -> 0.606, six unseen drives pooled 0.577 -> 0.592 (README model
# card). At the 64x128 input it was no better (0.479 against 0.497 trained from scratch): there
# the features do not carry the distance of a car a few pixels wide.
ARCHS["dilated_pos"] = dict(ARCHS["dilated"], pos=True)
# "dilated_pos_r2": "dilated_pos" whose second stride-2 convolution keeps the rows (stride
# 1 x 2): the feature map has twice the rows (4 x 2 stride), so the view transform has twice
# the range resolution far ahead, where a ground point moves a fraction of a feature row per
# metre (in the default rig, 11 BEV cells 46-57 m straight ahead read one feature pixel at
# stride 4; at 4 x 2 that run is 6 and 5). The convolutions after it dilate their rows twice
# as far (the "a trous" trick), so with "dilated_pos"'s weights (same shapes) the even
# feature rows are exactly "dilated_pos"'s features and the odd rows the same network
# shifted by half a row: it starts from that model where that model was. Those convolutions
# cost twice as much (the backbone about 1.8x).
_r2 = [list(l) for l in ARCHS["dilated"]["backbone"]]
_r2[2][3] = (1, 2)
for _l in _r2[3:]:
    _l[4] = (2 * _l[4], _l[4])
ARCHS["dilated_pos_r2"] = dict(ARCHS["dilated"], pos=True, backbone=[tuple(l) for l in _r2], stride=(4, 2))
# "dilated_pos_r2z": "dilated_pos_r2" whose BEV cells sample the features at two heights,
# 0.5 m and the ground (0 m), concatenated (the heads take 2 x FEAT_C channels; redline's
# `bev_lift_m = [0.5, 0.0]`). Along a camera ray every cell from `r (h - z) / h` on reads an
# object at range r (camera height h = 1.6 m): at 0.5 m a car 50 m ahead covers the cells
# from 34 m on, so the only range cue is where on the car the pixel lies; at 0 m its near
# edge in the BEV is its own near face. Fine-tuned from "dilated_pos_r2" with the new
# channels' weights zero (train.py --init), so it starts where that model was.
ARCHS["dilated_pos_r2z"] = dict(ARCHS["dilated_pos_r2"], lifts=(0.5, 0.0))
# "dilated_pos_r2zl": "dilated_pos_r2z" whose BEV cells read the feature maps linearly
# between the two rows around their point instead of at the nearest row (redline's
# `bev_sampling = "row_linear"`). Far away a feature row spans metres of range (about 4 m
# at 50 m in the telephoto), so with nearest sampling a run of cells along a ray reads one
# identical vector; interpolated, a cell's features change with its range. Same weights
# as "dilated_pos_r2z" (fine-tuned from it).
ARCHS["dilated_pos_r2zl"] = dict(ARCHS["dilated_pos_r2z"], sampling="row_linear")
ARCH = "dilated"
BACKBONE = ARCHS[ARCH]["backbone"]
DET_HIDDEN = ARCHS[ARCH]["det"]
SEG_HIDDEN = ARCHS[ARCH]["seg"]
POS = False
# Heights (m) at which the view transform samples the features, in channel order (the
# dataset's tables `bev_sources_s{STRIDE}[_lift{i}].npy`, redline's `bev_lift_m`).
LIFTS = (0.5,)
# How the view transform reads the feature maps (redline's `bev_sampling`).
SAMPLING = "nearest"


def set_arch(name):
    """Selects the architecture the next DrivingNet is built with."""
    global ARCH, BACKBONE, DET_HIDDEN, SEG_HIDDEN, POS, STRIDE, STRIDE_X, STRIDE_Y, LIFTS, SAMPLING
    if name not in ARCHS:
        raise SystemExit(f"unknown architecture {name!r}: use one of {sorted(ARCHS)}")
    ARCH = name
    BACKBONE, DET_HIDDEN, SEG_HIDDEN = ARCHS[name]["backbone"], ARCHS[name]["det"], ARCHS[name]["seg"]
    LIFTS = tuple(ARCHS[name].get("lifts", (0.5,)))
    SAMPLING = ARCHS[name].get("sampling", "nearest")
    # The heads' first convolution takes the BEV grid: FEAT_C channels per lift height.
    DET_HIDDEN = [(DET_HIDDEN[0][0] * len(LIFTS),) + tuple(DET_HIDDEN[0][1:])] + list(DET_HIDDEN[1:])
    SEG_HIDDEN = [(SEG_HIDDEN[0][0] * len(LIFTS),) + tuple(SEG_HIDDEN[0][1:])] + list(SEG_HIDDEN[1:])
    POS = ARCHS[name].get("pos", False)
    STRIDE_X, STRIDE_Y = ARCHS[name].get("stride", (4, 4))
    STRIDE = STRIDE_X if STRIDE_X == STRIDE_Y else f"{STRIDE_X}x{STRIDE_Y}"


# Largest radial distance the position map encodes as 1.0 (the default grid's far corner is
# at 68.4 m).
POS_RANGE_M = 70.0


def position_map(bev):
    """[3, ny, nx] float32 in [0, 1] at each BEV cell centre: forward position
    (x - x0) / (nx res), lateral (y - y0) / (ny res), distance from the ego origin /
    POS_RANGE_M (clamped). Non-negative, so it quantizes with the features' ReLU
    quantization (zero point -128) unchanged."""
    ny, nx, res, x0, y0 = bev["ny"], bev["nx"], bev["res"], bev["x0"], bev["y0"]
    iy, ix = torch.meshgrid(torch.arange(ny, dtype=torch.float64), torch.arange(nx, dtype=torch.float64), indexing="ij")
    x, y = x0 + (ix + 0.5) * res, y0 + (iy + 0.5) * res
    r = torch.sqrt(x * x + y * y)
    return torch.stack([(x - x0) / (nx * res), (y - y0) / (ny * res), (r / POS_RANGE_M).clamp(max=1.0)]).float()


CLASSES = 3
SEG_CLASSES = 3
REG = 6


def conv(i, o, k, s=1, d=1):
    """`s`, `d`: one stride (dilation), or (rows, columns)."""
    pad = tuple(v * (k // 2) for v in d) if isinstance(d, tuple) else d * (k // 2)
    return nn.Conv2d(i, o, k, stride=s, padding=pad, dilation=d)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([conv(i, o, k, s, d) for (i, o, k, s, d) in BACKBONE])

    def forward(self, x, taps=None):
        for i, l in enumerate(self.layers):
            x = F.relu(l(x))
            if taps is not None:
                taps[f"backbone.{i}"] = x
        return x


class DetHead(nn.Module):
    def __init__(self, pos=None):
        """`pos`, a [P, ny, nx] position map, is concatenated after the input's channels."""
        super().__init__()
        layers = list(DET_HIDDEN)
        if pos is not None:
            i, o, k, d = layers[0]
            layers[0] = (i + pos.shape[0], o, k, d)
            self.register_buffer("pos", pos, persistent=False)
        else:
            self.pos = None
        self.hidden = nn.ModuleList([conv(i, o, k, 1, d) for (i, o, k, d) in layers])
        h = DET_HIDDEN[-1][1]
        self.heat = nn.Conv2d(h, CLASSES, 1)
        self.box = nn.Conv2d(h, REG, 1)
        nn.init.constant_(self.heat.bias, -4.0)

    def forward(self, x, taps=None):
        if self.pos is not None:
            x = torch.cat([x, self.pos[None].expand(x.shape[0], -1, -1, -1)], 1)
        for i, l in enumerate(self.hidden):
            x = F.relu(l(x))
            if taps is not None:
                taps[f"det.{i}"] = x
        h, b = self.heat(x), self.box(x)
        if taps is not None:
            taps["det.heat"], taps["det.box"] = h, b
        return h, b


class SegHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.ModuleList([conv(i, o, k, 1, d) for (i, o, k, d) in SEG_HIDDEN])
        self.out = nn.Conv2d(SEG_HIDDEN[-1][1], SEG_CLASSES, 1)

    def forward(self, x, taps=None):
        for i, l in enumerate(self.hidden):
            x = F.relu(l(x))
            if taps is not None:
                taps[f"seg.{i}"] = x
        y = self.out(x)
        if taps is not None:
            taps["seg.out"] = y
        return y


class BevTransform(nn.Module):
    """redline's view transform and temporal fusion, from its exported tables."""

    def __init__(self, taps, ny, nx):
        super().__init__()
        taps = torch.as_tensor(taps, dtype=torch.long)  # [lifts, cells, 4, 2]: (pixel, weight)
        self.ny, self.nx = ny, nx
        self.register_buffer("src", taps[..., 0], persistent=False)  # -1 = unused
        w = taps[..., 1].float()
        # Each cell's weighted mean of its taps (none: 0, the zero point).
        self.register_buffer("w", w / w.sum(2, keepdim=True).clamp(min=1.0), persistent=False)

    def project(self, feats):
        """feats [B, cams, C, fh, fw] -> BEV [B, lifts * C, ny, nx] (lift heights'
        features concatenated in order)."""
        b, cams, c, fh, fw = feats.shape
        flat = feats.permute(0, 1, 3, 4, 2).reshape(b, cams * fh * fw, c)
        flat = torch.cat([flat, flat.new_zeros(b, 1, c)], 1)  # index N = "none" -> 0
        n = cams * fh * fw
        idx = torch.where(self.src >= 0, self.src, torch.full_like(self.src, n))
        maps = []
        for li in range(idx.shape[0]):
            g = 0
            for t in range(idx.shape[2]):
                g = g + flat[:, idx[li, :, t]] * self.w[li, :, t][None, :, None]  # [B, cells, C]
            maps.append(g)
        g = torch.cat(maps, 2)
        return g.permute(0, 2, 1).reshape(b, c * idx.shape[0], self.ny, self.nx)

    def fuse(self, cur, hist, warp, m):
        """cur [B, C, ny, nx]; hist list of K maps (oldest last: hist[j] = frame t-1-j);
        warp [B, K, cells] (-1 outside); m [B] maps available."""
        b, c = cur.shape[:2]
        cells = self.ny * self.nx
        acc = 2.0 * cur.reshape(b, c, cells)
        for j, h in enumerate(hist):
            w = warp[:, j]  # [B, cells]
            hf = torch.cat([h.reshape(b, c, cells), h.new_zeros(b, c, 1)], 2)
            wi = torch.where(w >= 0, w, torch.full_like(w, cells))
            acc = acc + torch.gather(hf, 2, wi[:, None, :].expand(b, c, cells))
        fused = acc / (2.0 + m.float())[:, None, None]
        return fused.reshape(b, c, self.ny, self.nx)


class DrivingNet(nn.Module):
    def __init__(self, taps, bev):
        """`taps`: the dataset's view-transform tables (data.Dataset.taps); `bev`: its grid
        (meta.json "bev": nx, ny, res, x0, y0)."""
        super().__init__()
        ny, nx = bev["ny"], bev["nx"]
        self.backbone = Backbone()
        self.bev = BevTransform(taps, ny, nx)
        self.det = DetHead(position_map(bev) if POS else None)
        self.seg = SegHead()

    def features(self, images, taps=None):
        """images int8-valued [B, cams, H, W, 3] -> [B, cams, C, fh, fw]."""
        b, cams, h, w, _ = images.shape
        x = images.reshape(b * cams, h, w, 3).permute(0, 3, 1, 2).float() / 128.0
        f = self.backbone(x, taps)
        return f.reshape(b, cams, *f.shape[1:])

    def forward(self, frames, warp, m, taps=None):
        """frames [B, 1 + K, cams, H, W, 3] (current first, then t-1, t-2 ...). `taps`, a
        dict, receives every layer's output for the current frame (calibration, SQNR)."""
        k = frames.shape[1] - 1
        cur = self.bev.project(self.features(frames[:, 0], taps))
        hist = []
        if k > 0:
            with torch.no_grad():
                for j in range(k):
                    hist.append(self.bev.project(self.features(frames[:, 1 + j])))
        fused = self.bev.fuse(cur, hist, warp, m)
        heat, box = self.det(fused, taps)
        seg = self.seg(fused, taps)
        return heat, box, seg
