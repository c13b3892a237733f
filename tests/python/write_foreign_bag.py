#!/usr/bin/env python3
"""Writes a ROS 2 bag the way a vehicle's recorder does, with no redline code involved.

Usage: python3 tests/python/write_foreign_bag.py OUT_DIR [--size WxH] [--frames N] [--texture]

  --size WxH   camera image size (default 160x96)
  --frames N   frames at 10 Hz (default 20)
  --texture    camera-like noise in the images (JPEG streams of realistic size, for timing)
  --corrupt K  frame K's rear image is cut off halfway (a damaged stream, headers intact)
  --split N    a ROS 2 bag directory OUT_DIR/bag/ instead of bag.mcap: metadata.yaml and one
               MCAP file per N frames (bag_0.mcap, bag_1.mcap, ...), as `ros2 bag record
               --max-bag-duration` splits a recording; /tf_static and camera_info only in the
               first file
  --rear-size WxH  the rear camera's images at another size than the front's (JPEG only; its
               calibration in rig.toml scaled to match)
  --storage sqlite3  the bag in SQLite storage, as ROS 2 Humble and earlier record by default:
               OUT_DIR/bag/ with bag_0.db3 (bag_K.db3 with --split) and metadata.yaml
               (storage_identifier sqlite3); rosbag2's Humble schema (topics, messages,
               schema, metadata tables and the timestamp index), same messages and log times
  --writer rosbags  the bag directory OUT_DIR/bag/ written by the `rosbags` package's rosbag2
               Writer (an independent implementation of rosbag2: its schema version 8 tables,
               metadata.yaml and file naming) in the --storage given (sqlite3 or mcap), with
               --compress-messages as its zstd message compression; not with --split
  --page-size N  the .db3 files' SQLite page size (default 4096, SQLite's and rosbag2's)
  --wal-crash  the .db3 files as a recorder in write-ahead-log mode (rosbag2's `resilient`
               preset) leaves them when it dies: the tables in bag_K.db3, every message in
               committed transactions of 10 still in bag_K.db3-wal, never checkpointed
  --compress-messages  each .db3 message's data compressed with zstd, as `ros2 bag record
               --compression-mode message --compression-format zstd` writes it
  --compress-files  each file of the bag directory compressed whole with zstd (bag_K.db3.zstd,
               bag_K.mcap.zstd), as `ros2 bag record --compression-mode file
               --compression-format zstd` leaves it; needs a bag directory (--split,
               --storage sqlite3 or --writer rosbags)
  --pose       the ego as a localiser's pose only: geometry_msgs/msg/PoseWithCovarianceStamped
               on /localization/pose_estimator/pose_with_covariance instead of the
               Odometry topic (redline.toml's odometry names it)
  --tf-ego     the ego only in the transform tree: /tf (tf2_msgs/msg/TFMessage) with map ->
               odom (100 m, -50 m, yaw 0.5 rad; every 5 frames) and odom -> base_link (each
               frame, so that the chain gives the drive's pose), plus a wheel transform;
               no Odometry topic (redline.toml's odometry names /tf)
  --tf-footprint  with --tf-ego, as mobile robots publish it: odom -> base_footprint in /tf
               and base_footprint -> base_link (0.3 m up) in /tf_static
  --turn R     the ego turns at R rad/s (an arc at 10 m/s) instead of driving straight
  --binning B  the front camera_info describes the sensor at B times the image size (its
               width, height and K) with binning_x = binning_y = B, as a binning driver does
  --roi        the front camera_info describes a sensor 40 px wider and 20 px taller, the
               images being the region of interest at (10, 6) of it (roi and K shifted)
  --video MODE  the cameras as H.264 video (libx264 through PyAV, 4:2:0, Main profile, a
               keyframe every 5 frames, one access unit per message): h264 on
               /sensing/camera/<name>/video as foxglove_msgs/msg/CompressedVideo; h264-bframes
               the same with B-frames (pictures coded out of display order: messages in coding
               order, each stamped with its own picture's time); h264-image as
               sensor_msgs/msg/CompressedImage with format "h264"; h264-ffmpeg as
               ffmpeg_image_transport_msgs/msg/FFMPEGPacket (encoding "libx264;yuv420p;rgb8;rgb8").
               Writes OUT_DIR/video_<name>.rgb:
               the pictures as FFmpeg's decoder gives them, converted to RGB (BT.601 video range,
               OpenCV's COLOR_YUV2RGB_I420 fixed point), every frame in display order; with
               --corrupt K the rear access unit K is cut to its first 8 bytes. Needs av (PyAV)
               and numpy. h265, h265-bframes, h265-image, h265-ffmpeg: the same as H.265
               (libx265, Main profile, 8-bit, each keyframe with its parameter sets; format
               "h265"; FFMPEGPacket encoding "hevc_nvenc;yuv420p;rgb8;rgb8", as a Jetson's
               encoder names it); h265-bframes keeps x265's open group of pictures: the first
               keyframe is IDR, the later ones CRA with leading B-frames (RASL); h265-10bit as
               h265 in Main 10 (yuv420p10le), the pictures written rounded to 8 bits
               ((v + 2) >> 2, at most 255) before the conversion to RGB; h264-bt709 as h264
               signalling BT.709 (video range) in its VUI, h265-bt709full as h265 signalling
               BT.709 full range: their pictures converted to RGB by those matrices (the
               standards' Kr/Kb in the 20-bit fixed point redline uses); h264-packet as h264
               on /sensing/camera/<name>/image_raw/h264 as h264_msgs/msg/Packet
               (h264_image_transport)
  --zero-stamps  camera and odometry header stamps left zero (as some drivers do); log times
               stay the arrival times
  --distortion K1  the front camera_info's k1 (default 0: an ideal pinhole)
  --distortion-model M  the front camera_info's distortion model (default plumb_bob)
  --raw ENC    raw sensor_msgs/msg/Image cameras on /sensing/camera/<name>/image_raw instead
               of JPEG, in encoding ENC: bayer_rggb8 (or bggr, gbrg, grbg; 8 or 16 bits, as a
               camera's colour filter samples the picture), yuv422 / yuv422_yuy2 (BT.601,
               video range, chroma averaged over each pixel pair), nv21 / nv12 (the same,
               4:2:0 semi-planar: chroma averaged over each 2x2 block), rgb16, bgr16, mono16
               (samples x 257), rgb8, bgr8, mono8; needs numpy

Written with the reference Python stack (`mcap`, `mcap-ros2-support`, JPEG by Pillow):
  OUT_DIR/bag.mcap   Autoware-style topics:
      /sensing/camera/front/image_raw/compressed  sensor_msgs/msg/CompressedImage (JPEG)
      /sensing/camera/front/camera_info           sensor_msgs/msg/CameraInfo (once)
      /sensing/camera/rear/image_raw/compressed   sensor_msgs/msg/CompressedImage (JPEG);
                                                  no camera_info: from the calibration file
      /localization/kinematic_state               nav_msgs/msg/Odometry
      /tf_static                                  tf2_msgs/msg/TFMessage: base_link ->
                                                  sensor_kit_base_link -> front optical frame
  OUT_DIR/rig.toml   the rear camera's calibration (redline's calibration file format)
  OUT_DIR/redline.toml  a config whose [sensors] table maps the bag
  stdout: one JSON object {"frames": N, "width": W, "height": H, "period_ns": P}

Stamps are absolute (Unix time, as real recorders write). Exit 3 when the Python packages are
missing (the message says how to install them).
"""

import io
import json
import math
import os
import sys

W, H = 160, 96
FRAMES = 20
TEXTURE = False
CORRUPT = -1
RAW = None
SPLIT = 0
K1 = 0.0
MODEL = "plumb_bob"
ZERO_STAMPS = False
REAR = None
STORAGE = "mcap"
PAGE_SIZE = 4096
COMPRESS = False
WAL_CRASH = False
COMPRESS_FILES = False
VIDEO = ""
VIDEO_DEF = "builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n"
FFMPEG_DEF = (
    "std_msgs/Header header\nint32 width\nint32 height\nstring encoding\nuint64 pts\nuint8 flags\n"
    "bool is_bigendian\nuint8[] data\n"
)
WRITER = "own"
POSE = False
TF_EGO = False
TF_FOOTPRINT = False
BINNING = 0
ROI = False
TURN = 0.0
PERIOD_NS = 100_000_000  # 10 Hz
T0 = 1_700_000_000 * 1_000_000_000  # 2023-11-14, Unix time

IMAGE_DEF = "std_msgs/Header header\nstring format\nuint8[] data\n"
RAW_IMAGE_DEF = (
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\n"
    "uint32 step\nuint8[] data\n"
)
HEADER_DEFS = (
    "================================================================================\n"
    "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n"
    "================================================================================\n"
    "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
)
CAMERA_INFO_DEF = (
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring distortion_model\n"
    "float64[] d\nfloat64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\n"
    "uint32 binning_y\nsensor_msgs/RegionOfInterest roi\n"
    "================================================================================\n"
    "MSG: sensor_msgs/RegionOfInterest\nuint32 x_offset\nuint32 y_offset\nuint32 height\n"
    "uint32 width\nbool do_rectify\n"
)
VEC = "float64 x\nfloat64 y\nfloat64 z\n"
QUAT = "float64 x\nfloat64 y\nfloat64 z\nfloat64 w\n"
SEP = "================================================================================\n"
POSE_DEF = (
    "std_msgs/Header header\ngeometry_msgs/PoseWithCovariance pose\n"
    + SEP + "MSG: geometry_msgs/PoseWithCovariance\ngeometry_msgs/Pose pose\nfloat64[36] covariance\n"
    + SEP + "MSG: geometry_msgs/Pose\ngeometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n"
    + SEP + "MSG: geometry_msgs/Point\n" + VEC
    + SEP + "MSG: geometry_msgs/Quaternion\n" + QUAT
)
POSE_TOPIC = "/localization/pose_estimator/pose_with_covariance"
MO_X, MO_Y, MO_YAW = 100.0, -50.0, 0.5  # map -> odom with --tf-ego
ODOM_DEF = (
    "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/PoseWithCovariance pose\n"
    "geometry_msgs/TwistWithCovariance twist\n"
    + SEP + "MSG: geometry_msgs/PoseWithCovariance\ngeometry_msgs/Pose pose\nfloat64[36] covariance\n"
    + SEP + "MSG: geometry_msgs/Pose\ngeometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n"
    + SEP + "MSG: geometry_msgs/Point\n" + VEC
    + SEP + "MSG: geometry_msgs/Quaternion\n" + QUAT
    + SEP + "MSG: geometry_msgs/TwistWithCovariance\ngeometry_msgs/Twist twist\nfloat64[36] covariance\n"
    + SEP + "MSG: geometry_msgs/Twist\ngeometry_msgs/Vector3 linear\ngeometry_msgs/Vector3 angular\n"
    + SEP + "MSG: geometry_msgs/Vector3\n" + VEC
)
TF_DEF = (
    "geometry_msgs/TransformStamped[] transforms\n"
    + SEP + "MSG: geometry_msgs/TransformStamped\nstd_msgs/Header header\nstring child_frame_id\n"
    "geometry_msgs/Transform transform\n"
    + SEP + "MSG: geometry_msgs/Transform\ngeometry_msgs/Vector3 translation\n"
    "geometry_msgs/Quaternion rotation\n"
    + SEP + "MSG: geometry_msgs/Vector3\n" + VEC
    + SEP + "MSG: geometry_msgs/Quaternion\n" + QUAT
)


def stamp(ns):
    return {"sec": ns // 1_000_000_000, "nanosec": ns % 1_000_000_000}


def quat_mul(a, b):
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def yaw_q(yaw):
    return (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))


def pitch_q(pitch):
    return (0.0, math.sin(pitch / 2), 0.0, math.cos(pitch / 2))


# ROS optical frame (z forward, x right, y down) in a body frame (x forward, y left, z up).
OPTICAL_TO_BODY = (-0.5, 0.5, -0.5, 0.5)


def picture(k, cam):
    """A deterministic RGB picture as a JPEG stream (see `rgb_picture`)."""
    img = rgb_picture(k, cam)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def raw_picture(k, cam, encoding):
    """The picture as the fields of a sensor_msgs/msg/Image in `encoding` (see --raw)."""
    import numpy as np

    rgb = np.asarray(rgb_picture(k, cam), dtype=np.uint8).astype(np.int32)
    r, g, b = rgb[:, :, 0], rgb[:, :, 1], rgb[:, :, 2]
    if encoding.startswith("bayer_") and encoding[-1] in "68":
        pattern, bits = encoding[6:10], 16 if encoding.endswith("16") else 8
        planes = {"r": r, "g": g, "b": b}
        mosaic = np.zeros((H, W), np.int32)
        for dy in range(2):
            for dx in range(2):
                colour = planes[pattern[2 * dy + dx]]
                mosaic[dy::2, dx::2] = colour[dy::2, dx::2]
        data = (mosaic * 257).astype("<u2") if bits == 16 else mosaic.astype(np.uint8)
        return data.tobytes(), W * (bits // 8)
    if encoding in ("yuv422", "yuv422_yuy2", "nv21", "nv12"):
        y = 16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255
        u = 128 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255
        v = 128 + (112.0 * r - 93.786 * g - 18.214 * b) / 255
        q = lambda a: np.clip(np.rint(a), 0, 255).astype(np.uint8)
        if encoding in ("nv21", "nv12"):
            block = lambda a: (a[0::2, 0::2] + a[0::2, 1::2] + a[1::2, 0::2] + a[1::2, 1::2]) / 4
            pairs = (block(v), block(u)) if encoding == "nv21" else (block(u), block(v))
            chroma = np.stack([q(c) for c in pairs], -1).reshape(H // 2, W)
            return np.concatenate([q(y), chroma]).tobytes(), W
        u2 = (u[:, 0::2] + u[:, 1::2]) / 2
        v2 = (v[:, 0::2] + v[:, 1::2]) / 2
        out = np.zeros((H, W // 2, 4), np.uint8)
        if encoding == "yuv422":  # U Y0 V Y1
            order = (q(u2), q(y[:, 0::2]), q(v2), q(y[:, 1::2]))
        else:  # Y0 U Y1 V
            order = (q(y[:, 0::2]), q(u2), q(y[:, 1::2]), q(v2))
        for i, plane in enumerate(order):
            out[:, :, i] = plane
        return out.tobytes(), W * 2
    grey = np.rint(0.299 * r + 0.587 * g + 0.114 * b).astype(np.int32)
    layouts = {
        "rgb8": (np.stack([r, g, b], -1), np.uint8),
        "bgr8": (np.stack([b, g, r], -1), np.uint8),
        "mono8": (grey, np.uint8),
        "rgb16": (np.stack([r, g, b], -1) * 257, "<u2"),
        "bgr16": (np.stack([b, g, r], -1) * 257, "<u2"),
        "mono16": (grey * 257, "<u2"),
    }
    if encoding not in layouts:
        raise ValueError(f"--raw {encoding}")
    pixels, dtype = layouts[encoding]
    data = pixels.astype(dtype)
    return data.tobytes(), data.nbytes // H


def rgb_picture(k, cam):
    """A deterministic RGB picture: a road-like gradient with a moving square; with
    --texture, camera-like noise on top (JPEG streams the size of real camera images)."""
    from PIL import Image, ImageDraw

    sky = bytes((90, 140, 200)) * W
    road = b"".join(bytes((70 + (x + cam * 20) % 40, 70, 75)) for x in range(W))
    img = Image.frombytes("RGB", (W, H), sky * (H // 2) + road * (H - H // 2))
    if 20 + 4 * k < W:
        ImageDraw.Draw(img).rectangle((20 + 4 * k, 50, min(39 + 4 * k, W - 1), 69), fill=(200, 30, 30))
    if TEXTURE:
        # Uniform noise seeded by frame and camera, blended in at 6 %: q90 streams of about
        # 340 KB at 1920x1080 and 50 KB at 640x480, the sizes camera drivers write.
        import random

        noise = random.Random(k * 16 + cam).randbytes(W * H * 3)
        img = Image.blend(img, Image.frombytes("RGB", (W, H), noise), 0.06)
    if cam == 1 and REAR:
        img = img.resize(REAR, Image.BILINEAR)
    return img


def image_topic(name):
    if VIDEO.endswith("-packet"):
        return f"/sensing/camera/{name}/image_raw/h264"
    if VIDEO and not VIDEO.endswith("-image"):
        return f"/sensing/camera/{name}/video"
    return f"/sensing/camera/{name}/image_raw" + ("" if RAW else "/compressed")


def encode_videos(out):
    """Each camera's pictures as H.264 or H.265 access units with the frame each shows (one per frame,
    in coding order), and
    OUT/video_<name>.rgb: what FFmpeg decodes them to, in display order, as RGB."""
    from fractions import Fraction

    import av
    import numpy as np

    videos = []
    codec = VIDEO.split("-")[0]
    bframes = 2 if VIDEO.endswith("-bframes") else 0
    for cam, name in enumerate(["front", "rear"]):
        enc = av.CodecContext.create("libx264" if codec == "h264" else "libx265", "w")
        pix_fmt = "yuv420p10le" if VIDEO == "h265-10bit" else "yuv420p"
        enc.width, enc.height, enc.pix_fmt = W, H, pix_fmt
        enc.time_base, enc.framerate = Fraction(1, 10), Fraction(10, 1)
        signal = {"h264-bt709": ":colormatrix=bt709",
                  "h265-bt709full": ":colormatrix=bt709:range=full"}.get(VIDEO, "")
        if codec == "h264":
            enc.options = {"profile": "main", "threads": "1",
                           "x264-params": f"keyint=5:min-keyint=5:scenecut=0:bframes={bframes}"
                           + signal}
        else:
            # Open GOP (CRA keyframes) only with B-frames: without them there are no leading
            # pictures and x265 writes IDR keyframes.
            enc.options = {"x265-params": "log-level=none:pools=1:frame-threads=1:keyint=5:"
                           f"min-keyint=5:scenecut=0:repeat-headers=1:bframes={bframes}:"
                           f"open-gop={int(bframes > 0)}" + signal}
        packets = []
        for k in range(FRAMES):
            frame = av.VideoFrame.from_image(rgb_picture(k, cam)).reformat(format=pix_fmt)
            frame.pts = k
            packets.extend(enc.encode(frame))
        packets.extend(enc.encode(None))
        # (access unit, the frame its picture shows), in coding order.
        units = [(bytes(p), p.pts) for p in packets]
        assert len(units) == FRAMES, (len(units), FRAMES)
        dec = av.CodecContext.create("h264" if codec == "h264" else "hevc", "r")
        pictures = []
        for unit, _ in units:
            for pic in dec.decode(av.Packet(unit)):
                pictures.append(pic)
        pictures.extend(dec.decode(None))
        assert len(pictures) == FRAMES, len(pictures)
        with open(os.path.join(out, f"video_{name}.rgb"), "wb") as rgb_file:
            for pic in pictures:
                rgb_file.write(i420_to_rgb(np, pic, VIDEO).tobytes())
        videos.append(units)
    return videos


def yuv_matrix(mode):
    """The 20-bit fixed-point YUV -> RGB constants (y0, cy, cvr, cvg, cug, cub) of a --video
    mode: OpenCV's BT.601 video range, or the BT.709 ones computed as redline computes them
    (the same float operations, rounded half away from zero)."""
    if mode not in ("h264-bt709", "h265-bt709full"):
        return 16, 1220542, 1673527, -852492, -409993, 2116026
    kr, kb = 0.2126, 0.0722
    kg = 1.0 - kr - kb
    full = mode.endswith("full")
    y0, sy, sc = (0, 1.0, 1.0) if full else (16, 255.0 / 219.0, 255.0 / 224.0)
    fixed = lambda c: int(math.copysign(math.floor(abs(c * float(1 << 20)) + 0.5), c))
    return (y0, fixed(sy), fixed(2.0 * (1.0 - kr) * sc), fixed(-2.0 * (1.0 - kr) * kr / kg * sc),
            fixed(-2.0 * (1.0 - kb) * kb / kg * sc), fixed(2.0 * (1.0 - kb) * sc))


def i420_to_rgb(np, pic, mode=""):
    """A decoded yuv420p picture as RGB: BT.601 video range in OpenCV's 20-bit fixed point
    (COLOR_YUV2RGB_I420), or the matrix `mode` signals (yuv_matrix), each pixel with its
    2x2 block's chroma."""
    if pic.format.name == "yuv420p10le":
        # 10-bit samples rounded to 8 bits as redline does: (v + 2) >> 2, at most 255.
        planes = [np.minimum((np.frombuffer(bytes(p), "<u2").reshape(p.height, p.line_size // 2)
                              [:, : p.width].astype(np.int64) + 2) >> 2, 255)
                  for p in pic.planes]
    else:
        planes = [np.frombuffer(bytes(p), np.uint8).reshape(p.height, p.line_size)[:, : p.width]
                  for p in pic.planes]
    y = planes[0].astype(np.int64)
    up = lambda c: np.repeat(np.repeat(c.astype(np.int64), 2, 0), 2, 1) - 128
    u, v = up(planes[1]), up(planes[2])
    y0, cy, cvr, cvg, cug, cub = yuv_matrix(mode)
    yy = np.maximum(y - y0, 0) * cy + (1 << 19)
    r = (yy + cvr * v) >> 20
    g = (yy + cvg * v + cug * u) >> 20
    b = (yy + cub * u) >> 20
    return np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)


def damaged(jpeg):
    """The stream cut off in the middle of its entropy-coded data (headers intact)."""
    return jpeg[: len(jpeg) // 2]


def tf(parent, child, t, q, ns):
    return {
        "header": {"stamp": stamp(ns), "frame_id": parent},
        "child_frame_id": child,
        "transform": {
            "translation": {"x": t[0], "y": t[1], "z": t[2]},
            "rotation": {"x": q[0], "y": q[1], "z": q[2], "w": q[3]},
        },
    }


def compress_files(bag, files):
    """With --compress-files, each file compressed whole into NAME.zstd (a zstd stream, as
    rosbag2's zstd file compressor writes it) and removed; the names now in the bag."""
    if not COMPRESS_FILES:
        return files
    import zstandard

    for name in files:
        path = os.path.join(bag, name)
        with open(path, "rb") as src, open(path + ".zstd", "wb") as dst:
            zstandard.ZstdCompressor(level=1).copy_stream(src, dst)
        os.remove(path)
    return [name + ".zstd" for name in files]


def write_metadata(bag, files, storage):
    """What rosbag2 writes beside its files (the fields redline reads, and a few more)."""
    listed = "".join(f"    - {name}\n" for name in files)
    compression = ("zstd", "MESSAGE") if COMPRESS else ("zstd", "FILE") if COMPRESS_FILES else ("", "")
    with open(os.path.join(bag, "metadata.yaml"), "w") as meta:
        meta.write(
            f"rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: {storage}\n"
            f"  duration:\n    nanoseconds: {FRAMES * PERIOD_NS}\n"
            f"  starting_time:\n    nanoseconds_since_epoch: {T0}\n"
            f"  message_count: 0\n  topics_with_message_count: []\n"
            f'  compression_format: "{compression[0]}"\n  compression_mode: "{compression[1]}"\n'
            f"  relative_file_paths:\n{listed}  files: []\n"
        )


def with_rosbags(mcap_path, bag_dir):
    """The messages of an MCAP file, in file order, rewritten by the `rosbags` package's
    rosbag2 Writer into the bag directory `bag_dir` (same serialized bytes and log times)."""
    import shutil
    from mcap.reader import make_reader
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    if os.path.exists(bag_dir):
        shutil.rmtree(bag_dir)
    plugin = StoragePlugin.SQLITE3 if STORAGE == "sqlite3" else StoragePlugin.MCAP
    store = get_typestore(Stores.ROS2_HUMBLE)
    writer = Writer(bag_dir, version=8, storage_plugin=plugin)
    if COMPRESS:
        writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
    if COMPRESS_FILES:
        writer.set_compression(CompressionMode.FILE, CompressionFormat.ZSTD)
    writer.open()
    connections = {}
    with open(mcap_path, "rb") as f:
        for schema, channel, message in make_reader(f).iter_messages(log_time_order=False):
            if channel.topic not in connections:
                connections[channel.topic] = writer.add_connection(channel.topic, schema.name, typestore=store)
            writer.write(connections[channel.topic], message.log_time, message.data)
    writer.close()


def to_db3(mcap_path, db3_path):
    """The messages of an MCAP file, in file order, as rosbag2's sqlite3 storage plugin
    (Humble) writes them: the same serialized bytes and receive times."""
    import shutil
    import sqlite3
    from mcap.reader import make_reader

    for old in (db3_path, db3_path + "-wal"):
        if os.path.exists(old):
            os.remove(old)
    db = sqlite3.connect(db3_path, isolation_level=None)
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")
    db.executescript(
        "CREATE TABLE schema(schema_version INTEGER PRIMARY KEY,ros_distro TEXT NOT NULL);"
        "INSERT INTO schema VALUES (3, 'humble');"
        "CREATE TABLE metadata(id INTEGER PRIMARY KEY,metadata_version INTEGER NOT NULL,metadata TEXT NOT NULL);"
        "CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,"
        "serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL);"
        "CREATE TABLE messages(id INTEGER PRIMARY KEY,topic_id INTEGER NOT NULL,"
        "timestamp INTEGER NOT NULL, data BLOB NOT NULL);"
        "CREATE INDEX timestamp_idx ON messages (timestamp ASC);"
    )
    if WAL_CRASH:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
    compress = None
    if COMPRESS:
        import zstandard

        compress = zstandard.ZstdCompressor().compress
    topic_ids = {}
    db.execute("BEGIN")
    with open(mcap_path, "rb") as f:
        for k, (schema, channel, message) in enumerate(make_reader(f).iter_messages(log_time_order=False)):
            if k % 10 == 9:
                db.execute("COMMIT")
                db.execute("BEGIN")
            if channel.topic not in topic_ids:
                topic_ids[channel.topic] = len(topic_ids) + 1
                db.execute(
                    "INSERT INTO topics VALUES (?, ?, ?, ?, ?)",
                    (topic_ids[channel.topic], channel.topic, schema.name, channel.message_encoding, ""),
                )
            data = compress(message.data) if compress else message.data
            db.execute(
                "INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)",
                (topic_ids[channel.topic], message.log_time, data),
            )
    db.execute("COMMIT")
    if WAL_CRASH:
        # The files as they are while the recorder runs: closing would checkpoint the log.
        for name in (db3_path, db3_path + "-wal"):
            shutil.copy(name, name + ".crash")
    db.close()
    if WAL_CRASH:
        for name in (db3_path, db3_path + "-wal"):
            os.replace(name + ".crash", name)


def main():
    global W, H, FRAMES, TEXTURE, CORRUPT, RAW, SPLIT, K1, MODEL, ZERO_STAMPS, REAR, STORAGE, PAGE_SIZE, COMPRESS, WAL_CRASH, POSE, TURN, TF_EGO, WRITER, TF_FOOTPRINT, BINNING, ROI, COMPRESS_FILES, VIDEO
    args = sys.argv[1:]
    try:
        out = args.pop(0)
        while args:
            flag, value = args.pop(0), args.pop(0) if args and not args[0].startswith("--") else None
            if flag == "--size":
                W, H = (int(v) for v in value.split("x"))
            elif flag == "--frames":
                FRAMES = int(value)
            elif flag == "--corrupt":
                CORRUPT = int(value)
            elif flag == "--distortion-model" and value:
                MODEL = value
            elif flag == "--distortion":
                K1 = float(value)
            elif flag == "--split":
                SPLIT = int(value)
            elif flag == "--raw" and value:
                RAW = value
            elif flag == "--rear-size" and value:
                REAR = tuple(int(v) for v in value.split("x"))
            elif flag == "--storage" and value in ("mcap", "sqlite3"):
                STORAGE = value
            elif flag == "--page-size" and value:
                PAGE_SIZE = int(value)
            elif flag == "--writer" and value in ("own", "rosbags"):
                WRITER = value
            elif flag == "--binning" and value:
                BINNING = int(value)
            elif flag == "--roi" and value is None:
                ROI = True
            elif flag == "--tf-footprint" and value is None:
                TF_FOOTPRINT = True
            elif flag == "--tf-ego" and value is None:
                TF_EGO = True
            elif flag == "--pose" and value is None:
                POSE = True
            elif flag == "--turn" and value:
                TURN = float(value)
            elif flag == "--wal-crash" and value is None:
                WAL_CRASH = True
            elif flag == "--compress-messages" and value is None:
                COMPRESS = True
            elif flag == "--compress-files" and value is None:
                COMPRESS_FILES = True
            elif flag == "--video" and value in [c + f for c in ("h264", "h265")
                                                 for f in ("", "-bframes", "-image", "-ffmpeg")] + [
                                                     "h265-10bit", "h264-bt709", "h265-bt709full",
                                                     "h264-packet"]:
                VIDEO = value
            elif flag == "--zero-stamps" and value is None:
                ZERO_STAMPS = True
            elif flag == "--texture" and value is None:
                TEXTURE = True
            else:
                raise ValueError(flag)
        if REAR and RAW:
            raise ValueError("--rear-size with --raw")
        if VIDEO and (RAW or REAR):
            raise ValueError("--video with --raw or --rear-size")
        if WRITER == "rosbags" and (SPLIT or WAL_CRASH):
            raise ValueError("--writer rosbags with --split or --wal-crash")
        if COMPRESS_FILES and not (SPLIT or STORAGE == "sqlite3" or WRITER == "rosbags"):
            raise ValueError("--compress-files without a bag directory")
        if COMPRESS_FILES and (COMPRESS or WAL_CRASH):
            raise ValueError("--compress-files with --compress-messages or --wal-crash")
        if (COMPRESS or WAL_CRASH) and STORAGE != "sqlite3" and WRITER != "rosbags":
            raise ValueError("--compress-messages or --wal-crash without --storage sqlite3")
    except (IndexError, ValueError, AttributeError):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from mcap_ros2.writer import Writer
        import PIL  # noqa: F401

        if RAW:
            import numpy  # noqa: F401
        if WRITER == "rosbags":
            import rosbags  # noqa: F401
        if VIDEO:
            import av  # noqa: F401
            import numpy  # noqa: F401
    except ImportError as e:
        print(f"missing Python package ({e}): pip install mcap mcap-ros2-support pillow numpy rosbags av", file=sys.stderr)
        return 3
    os.makedirs(out, exist_ok=True)
    fx = fy = 120.0
    files = []

    def open_writer():
        """The next file of the bag and its writer, with every schema registered."""
        if SPLIT:
            os.makedirs(os.path.join(out, "bag"), exist_ok=True)
            name = os.path.join("bag", f"bag_{len(files)}.mcap")
        else:
            name = "bag.mcap"
        files.append(os.path.basename(name))
        f = open(os.path.join(out, name), "wb")
        w = Writer(f)
        if RAW:
            img = w.register_msgdef("sensor_msgs/msg/Image", RAW_IMAGE_DEF + HEADER_DEFS)
        elif VIDEO.endswith("-ffmpeg"):
            img = w.register_msgdef("ffmpeg_image_transport_msgs/msg/FFMPEGPacket", FFMPEG_DEF + HEADER_DEFS)
        elif VIDEO.endswith("-packet"):
            img = w.register_msgdef("h264_msgs/msg/Packet",
                                    "std_msgs/Header header\nint64 seq\nuint8[] data\n" + HEADER_DEFS)
        elif VIDEO and not VIDEO.endswith("-image"):
            time_def = "=" * 80 + "\nMSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
            img = w.register_msgdef("foxglove_msgs/msg/CompressedVideo", VIDEO_DEF + time_def)
        else:
            img = w.register_msgdef("sensor_msgs/msg/CompressedImage", IMAGE_DEF + HEADER_DEFS)
        info = w.register_msgdef("sensor_msgs/msg/CameraInfo", CAMERA_INFO_DEF + HEADER_DEFS)
        if POSE:
            odom = w.register_msgdef("geometry_msgs/msg/PoseWithCovarianceStamped", POSE_DEF + HEADER_DEFS)
        else:
            odom = w.register_msgdef("nav_msgs/msg/Odometry", ODOM_DEF + HEADER_DEFS)
        tf = w.register_msgdef("tf2_msgs/msg/TFMessage", TF_DEF + HEADER_DEFS)
        return f, w, img, info, odom, tf

    videos = encode_videos(out) if VIDEO else None
    f, w, img_schema, info_schema, odom_schema, tf_schema = open_writer()
    # Static transforms: base_link -> sensor_kit_base_link (1.5 m forward, 1.6 m up)
    # -> front camera optical frame (pitched 5 degrees down).
    front_q = quat_mul(pitch_q(math.radians(5.0)), OPTICAL_TO_BODY)
    w.write_message(
        "/tf_static",
        tf_schema,
        {
            "transforms": [
                tf("base_link", "sensor_kit_base_link", (1.5, 0.0, 1.6), yaw_q(0.0), T0),
                tf("sensor_kit_base_link", "camera/front/camera_optical_link", (0.0, 0.0, 0.0), front_q, T0),
            ]
            + ([tf("base_footprint", "base_link", (0.0, 0.0, 0.3), yaw_q(0.0), T0)] if TF_FOOTPRINT else [])
        },
        log_time=T0,
        publish_time=T0,
    )
    # The sensor's full resolution and K; the images are W x H after the region of interest
    # and binning (--binning, --roi), as image_geometry reads a CameraInfo.
    b = max(BINNING, 1)
    ox, oy = (10, 6) if ROI else (0, 0)
    sw, sh = (W + 40, H + 20) if ROI else (W, H)
    sfx, scx, scy = fx * b, (W / 2) * b + ox, (H / 2) * b + oy
    w.write_message(
        "/sensing/camera/front/camera_info",
        info_schema,
        {
            "header": {"stamp": stamp(T0), "frame_id": "camera/front/camera_optical_link"},
            "height": sh * b,
            "width": sw * b,
            "distortion_model": MODEL,
            "d": [K1, 0.0, 0.0, 0.0, 0.0],
            "k": [sfx, 0.0, scx, 0.0, sfx, scy, 0.0, 0.0, 1.0],
            "r": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            "p": [sfx, 0.0, scx, 0.0, 0.0, sfx, scy, 0.0, 0.0, 0.0, 1.0, 0.0],
            "binning_x": BINNING,
            "binning_y": BINNING,
            "roi": {"x_offset": ox, "y_offset": oy, "height": H if ROI else 0, "width": W if ROI else 0,
                    "do_rectify": False},
        },
        log_time=T0,
        publish_time=T0,
    )
    for k in range(FRAMES):
        t = T0 + k * PERIOD_NS
        if SPLIT and k > 0 and k % SPLIT == 0:
            w.finish()
            f.close()
            f, w, img_schema, info_schema, odom_schema, tf_schema = open_writer()
        secs = k * PERIOD_NS / 1e9
        if TURN:
            # an arc at 10 m/s turning at TURN rad/s
            yaw = TURN * secs
            x, y = 10.0 / TURN * math.sin(yaw), 10.0 / TURN * (1.0 - math.cos(yaw))
        else:
            x, y, yaw = 10.0 * k * PERIOD_NS / 1e9, 0.0, 0.0  # 10 m/s straight ahead
        header = {"stamp": stamp(0 if ZERO_STAMPS else t), "frame_id": "map"}
        pose = {
            "pose": {
                "position": {"x": x, "y": y, "z": 0.0},
                "orientation": {"x": 0.0, "y": 0.0, "z": math.sin(yaw / 2), "w": math.cos(yaw / 2)},
            },
            "covariance": [0.0] * 36,
        }
        if TF_EGO:
            # map -> odom is (MO_X, MO_Y, MO_YAW); odom -> base_link is what makes the chain
            # the pose (x, y, yaw) in map.
            dx, dy = x - MO_X, y - MO_Y
            c, s_ = math.cos(MO_YAW), math.sin(MO_YAW)
            moving = "base_footprint" if TF_FOOTPRINT else "base_link"
            transforms = [tf("odom", moving, (c * dx + s_ * dy, -s_ * dx + c * dy, 0.0), yaw_q(yaw - MO_YAW), t),
                          tf("base_link", "wheel_fl", (1.4, 0.8, 0.3), yaw_q(0.1 * k), t)]
            if k % 5 == 0:
                transforms.insert(0, tf("map", "odom", (MO_X, MO_Y, 0.0), yaw_q(MO_YAW), t))
            w.write_message("/tf", tf_schema, {"transforms": transforms}, log_time=t, publish_time=t)
        elif POSE:
            w.write_message(POSE_TOPIC, odom_schema, {"header": header, "pose": pose},
                            log_time=t, publish_time=t)
        else:
            w.write_message(
                "/localization/kinematic_state",
                odom_schema,
                {
                    "header": header,
                    "child_frame_id": "base_link",
                    "pose": pose,
                    "twist": {
                        "twist": {
                            "linear": {"x": 10.0, "y": 0.0, "z": 0.0},
                            "angular": {"x": 0.0, "y": 0.0, "z": TURN},
                        },
                        "covariance": [0.0] * 36,
                    },
                },
                log_time=t,
                publish_time=t,
            )
        for cam, name in enumerate(["front", "rear"]):
            # cameras arrive a few ms after their stamp, as over a network
            arrival = t + 3_000_000 + cam * 1_000_000
            header = {"stamp": stamp(0 if ZERO_STAMPS else t), "frame_id": f"camera/{name}/camera_optical_link"}
            if videos:
                data, shown = videos[cam][k]
                header["stamp"] = stamp(0 if ZERO_STAMPS else T0 + shown * PERIOD_NS)
                if (k, cam) == (CORRUPT, 1):
                    data = data[:8]
                codec = VIDEO.split("-")[0]
                if VIDEO.endswith("-image"):
                    msg = {"header": header, "format": codec, "data": data}
                elif VIDEO.endswith("-packet"):
                    msg = {"header": header, "seq": k, "data": data}
                elif VIDEO.endswith("-ffmpeg"):
                    encoder = "libx264" if codec == "h264" else "hevc_nvenc"
                    msg = {"header": header, "width": W, "height": H, "encoding": f"{encoder};yuv420p;rgb8;rgb8",
                           "pts": shown, "flags": int(shown % 5 == 0), "is_bigendian": False, "data": data}
                else:
                    msg = {"timestamp": header["stamp"], "frame_id": header["frame_id"],
                           "data": data, "format": codec}
            elif RAW:
                data, step = raw_picture(k, cam, RAW)
                if (k, cam) == (CORRUPT, 1):
                    data = data[: len(data) // 2]
                msg = {"header": header, "height": H, "width": W, "encoding": RAW,
                       "is_bigendian": 0, "step": step, "data": data}
            else:
                jpeg = picture(k, cam)
                msg = {"header": header, "format": "rgb8; jpeg compressed bgr8",
                       "data": damaged(jpeg) if (k, cam) == (CORRUPT, 1) else jpeg}
            w.write_message(
                image_topic(name),
                img_schema,
                msg,
                log_time=arrival,
                publish_time=arrival,
            )
    w.finish()
    f.close()
    if WRITER == "rosbags":
        with_rosbags(os.path.join(out, "bag.mcap"), os.path.join(out, "bag"))
        os.remove(os.path.join(out, "bag.mcap"))
    elif STORAGE == "sqlite3":
        bag = os.path.join(out, "bag")
        os.makedirs(bag, exist_ok=True)
        mcaps = [os.path.join(bag, n) for n in files] if SPLIT else [os.path.join(out, "bag.mcap")]
        files = []
        for k, path in enumerate(mcaps):
            files.append(f"bag_{k}.db3")
            to_db3(path, os.path.join(bag, files[-1]))
            os.remove(path)
        files = compress_files(bag, files)
        write_metadata(bag, files, "sqlite3")
    elif SPLIT:
        files = compress_files(os.path.join(out, "bag"), files)
        write_metadata(os.path.join(out, "bag"), files, "mcap")
    rw, rh = REAR or (W, H)

    with open(os.path.join(out, "rig.toml"), "w") as f:
        f.write(
            '# the rear camera: no camera_info or transform in the bag\n[[camera]]\nname = "rear"\n'
            f"width = {rw}\nheight = {rh}\nfx = {fx * rw / W}\nfy = {fy * rh / H}\n"
            f"cx = {rw / 2}\ncy = {rh / 2}\n"
            "x = -1.0\ny = 0.0\nz = 1.6\nyaw_deg = 180.0\npitch_deg = 5.0\n"
        )
    with open(os.path.join(out, "redline.toml"), "w") as f:
        f.write(
            "[sensors]\n"
            f'odometry = "{"/tf" if TF_EGO else POSE_TOPIC if POSE else "/localization/kinematic_state"}"\n'
            'tf_static = "/tf_static"\n'
            'calibration = "rig.toml"\n'
            "[[sensors.cameras]]\n"
            'name = "front"\n'
            f'image = "{image_topic("front")}"\n'
            'camera_info = "/sensing/camera/front/camera_info"\n'
            "[[sensors.cameras]]\n"
            'name = "rear"\n'
            f'image = "{image_topic("rear")}"\n'
        )
    print(json.dumps({"frames": FRAMES, "width": W, "height": H, "period_ns": PERIOD_NS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
