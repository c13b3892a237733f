#!/usr/bin/env python3
"""Writes the fixture that checks redline's raw-image conversions against OpenCV.

For each sensor_msgs/Image encoding redline converts beyond plain 8-bit RGB (16-bit RGB and
grey, the four Bayer mosaics in 8 and 16 bits, YUV 4:2:2 in both byte orders, YUV 4:2:0
semi-planar as nv21 and nv12) it writes a
seeded random image in that encoding and the 8-bit RGB that cv_bridge's
`toCvCopy(msg, "rgb8")` makes of it — the same OpenCV calls cv_bridge makes:
`cvtColor` with cv_bridge's conversion code (`COLOR_BayerBG2RGB` for `bayer_rggb8`, ...,
`COLOR_YUV2RGB_UYVY` for `yuv422`), then for 16-bit sources `convertTo(CV_8U, 255/65535)`.

    python3 tests/python/pixel_encoding_fixture.py sim/tests/fixtures/pixel_encodings

writes DIR/manifest.json (one entry per case: encoding, width, height, is_bigendian, the
input and expected-output file names) and the raw files. Requires numpy and
opencv-python-headless (tested with OpenCV 5.0.0). The files are committed: the Rust test
(sim/src/msgs/pixel_encoding.rs) needs no Python.
"""

import json
import os
import sys

import cv2
import numpy as np

# cv_bridge's conversion codes from a ROS mosaic to RGB (OpenCV names a Bayer pattern by
# the 2x2 cell that starts at its second row and column).
BAYER_CODES = {
    "rggb": cv2.COLOR_BayerBG2RGB,
    "bggr": cv2.COLOR_BayerRG2RGB,
    "gbrg": cv2.COLOR_BayerGR2RGB,
    "grbg": cv2.COLOR_BayerGB2RGB,
}
# Colour index (0 = R, 1 = G, 2 = B) of each pattern's top-left 2x2 cell.
BAYER_CELLS = {
    "rggb": [[0, 1], [1, 2]],
    "bggr": [[2, 1], [1, 0]],
    "gbrg": [[1, 2], [0, 1]],
    "grbg": [[1, 0], [2, 1]],
}


def to8(img16):
    """cv_bridge's 16 -> 8 bit step: convertTo(CV_8U, 255 / 65535), rounded, saturated."""
    return cv2.convertScaleAbs(img16, alpha=255.0 / 65535.0)


def check_bayer_codes():
    """A flat colour mosaiced by a ROS pattern must come back as that colour: guards the
    pattern-to-code table above."""
    colour = np.array([200, 90, 17], np.uint8)
    for name, cells in BAYER_CELLS.items():
        mosaic = np.zeros((6, 8), np.uint8)
        for y in range(6):
            for x in range(8):
                mosaic[y, x] = colour[cells[y % 2][x % 2]]
        rgb = cv2.cvtColor(mosaic, BAYER_CODES[name])
        assert (rgb == colour).all(), (name, rgb[2, 2])


def main(out_dir):
    check_bayer_codes()
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20261130)
    cases = []

    def add(encoding, width, height, raw, rgb, big_endian=False):
        stem = f"{encoding}_{width}x{height}" + ("_be" if big_endian else "")
        raw_bytes = raw.tobytes()
        with open(os.path.join(out_dir, stem + ".in"), "wb") as f:
            f.write(raw_bytes)
        assert rgb.dtype == np.uint8 and rgb.shape == (height, width, 3)
        with open(os.path.join(out_dir, stem + ".rgb"), "wb") as f:
            f.write(rgb.tobytes())
        cases.append(
            {
                "encoding": encoding,
                "width": width,
                "height": height,
                "is_bigendian": int(big_endian),
                "input": stem + ".in",
                "rgb": stem + ".rgb",
            }
        )

    # 16-bit interleaved: full-range samples, little endian, and one big-endian case.
    for width, height in [(7, 5)]:
        rgba = rng.integers(0, 65536, (height, width, 4), dtype=np.uint16)
        rgb = np.ascontiguousarray(rgba[:, :, :3])
        add("rgb16", width, height, rgb.astype("<u2"), to8(rgb))
        add("rgb16", width, height, rgb.astype(">u2"), to8(rgb), big_endian=True)
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])
        add("bgr16", width, height, bgr.astype("<u2"), to8(rgb))
        add("rgba16", width, height, rgba.astype("<u2"), to8(rgb))
        bgra = np.ascontiguousarray(rgba[:, :, [2, 1, 0, 3]])
        add("bgra16", width, height, bgra.astype("<u2"), to8(rgb))
        mono = np.ascontiguousarray(rgba[:, :, 0])
        add("mono16", width, height, mono.astype("<u2"), cv2.cvtColor(to8(mono), cv2.COLOR_GRAY2RGB))

    # Bayer: random samples (every mean rounds differently), odd and even sizes so that
    # both column and row parities reach the borders.
    for width, height in [(15, 9), (14, 8), (3, 3)]:
        for name, code in BAYER_CODES.items():
            m8 = rng.integers(0, 256, (height, width), dtype=np.uint8)
            add(f"bayer_{name}8", width, height, m8, cv2.cvtColor(m8, code))
            m16 = rng.integers(0, 65536, (height, width), dtype=np.uint16)
            add(f"bayer_{name}16", width, height, m16.astype("<u2"), to8(cv2.cvtColor(m16, code)))

    # YUV 4:2:2: random bytes cover out-of-range luma and chroma (clamping).
    for width, height in [(14, 9)]:
        uyvy = rng.integers(0, 256, (height, width, 2), dtype=np.uint8)
        add("yuv422", width, height, uyvy, cv2.cvtColor(uyvy, cv2.COLOR_YUV2RGB_UYVY))
        yuyv = rng.integers(0, 256, (height, width, 2), dtype=np.uint8)
        add("yuv422_yuy2", width, height, yuyv, cv2.cvtColor(yuyv, cv2.COLOR_YUV2RGB_YUY2))

    # YUV 4:2:0 semi-planar (luma rows, then half as many rows of chroma pairs): random
    # bytes again, and the smallest image, one 2x2 block.
    for width, height in [(14, 10), (2, 2)]:
        for name, code in [("nv21", cv2.COLOR_YUV2RGB_NV21), ("nv12", cv2.COLOR_YUV2RGB_NV12)]:
            yuv = rng.integers(0, 256, (height * 3 // 2, width), dtype=np.uint8)
            add(name, width, height, yuv, cv2.cvtColor(yuv, code))

    manifest = {"opencv": cv2.__version__, "cases": cases}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases written to {out_dir} (OpenCV {cv2.__version__})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
