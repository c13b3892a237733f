#!/usr/bin/env python3
"""Writes a ROS 2 bag the way a vehicle's recorder does, with no redline code involved.

Usage: python3 tests/python/write_foreign_bag.py OUT_DIR [--size WxH] [--frames N] [--texture]

  --size WxH   camera image size (default 160x96)
  --frames N   frames at 10 Hz (default 20)
  --texture    camera-like noise in the images (JPEG streams of realistic size, for timing)
  --corrupt K  frame K's rear image is cut off halfway (a damaged stream, headers intact)

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
PERIOD_NS = 100_000_000  # 10 Hz
T0 = 1_700_000_000 * 1_000_000_000  # 2023-11-14, Unix time

IMAGE_DEF = "std_msgs/Header header\nstring format\nuint8[] data\n"
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
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


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


def main():
    global W, H, FRAMES, TEXTURE, CORRUPT
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
            elif flag == "--texture" and value is None:
                TEXTURE = True
            else:
                raise ValueError(flag)
    except (IndexError, ValueError, AttributeError):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from mcap_ros2.writer import Writer
        import PIL  # noqa: F401
    except ImportError as e:
        print(f"missing Python package ({e}): pip install mcap mcap-ros2-support pillow", file=sys.stderr)
        return 3
    os.makedirs(out, exist_ok=True)
    fx = fy = 120.0
    with open(os.path.join(out, "bag.mcap"), "wb") as f:
        w = Writer(f)
        img_schema = w.register_msgdef("sensor_msgs/msg/CompressedImage", IMAGE_DEF + HEADER_DEFS)
        info_schema = w.register_msgdef("sensor_msgs/msg/CameraInfo", CAMERA_INFO_DEF + HEADER_DEFS)
        odom_schema = w.register_msgdef("nav_msgs/msg/Odometry", ODOM_DEF + HEADER_DEFS)
        tf_schema = w.register_msgdef("tf2_msgs/msg/TFMessage", TF_DEF + HEADER_DEFS)
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
            },
            log_time=T0,
            publish_time=T0,
        )
        w.write_message(
            "/sensing/camera/front/camera_info",
            info_schema,
            {
                "header": {"stamp": stamp(T0), "frame_id": "camera/front/camera_optical_link"},
                "height": H,
                "width": W,
                "distortion_model": "plumb_bob",
                "d": [0.0] * 5,
                "k": [fx, 0.0, W / 2, 0.0, fy, H / 2, 0.0, 0.0, 1.0],
                "r": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                "p": [fx, 0.0, W / 2, 0.0, 0.0, fy, H / 2, 0.0, 0.0, 0.0, 1.0, 0.0],
                "binning_x": 0,
                "binning_y": 0,
                "roi": {"x_offset": 0, "y_offset": 0, "height": 0, "width": 0, "do_rectify": False},
            },
            log_time=T0,
            publish_time=T0,
        )
        for k in range(FRAMES):
            t = T0 + k * PERIOD_NS
            x = 10.0 * k * PERIOD_NS / 1e9  # 10 m/s straight ahead
            w.write_message(
                "/localization/kinematic_state",
                odom_schema,
                {
                    "header": {"stamp": stamp(t), "frame_id": "map"},
                    "child_frame_id": "base_link",
                    "pose": {
                        "pose": {
                            "position": {"x": x, "y": 0.0, "z": 0.0},
                            "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0},
                        },
                        "covariance": [0.0] * 36,
                    },
                    "twist": {
                        "twist": {
                            "linear": {"x": 10.0, "y": 0.0, "z": 0.0},
                            "angular": {"x": 0.0, "y": 0.0, "z": 0.0},
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
                w.write_message(
                    f"/sensing/camera/{name}/image_raw/compressed",
                    img_schema,
                    {
                        "header": {"stamp": stamp(t), "frame_id": f"camera/{name}/camera_optical_link"},
                        "format": "rgb8; jpeg compressed bgr8",
                        "data": damaged(picture(k, cam)) if (k, cam) == (CORRUPT, 1) else picture(k, cam),
                    },
                    log_time=arrival,
                    publish_time=arrival,
                )
        w.finish()
    with open(os.path.join(out, "rig.toml"), "w") as f:
        f.write(
            '# the rear camera: no camera_info or transform in the bag\n[[camera]]\nname = "rear"\n'
            f"width = {W}\nheight = {H}\nfx = {fx}\nfy = {fy}\ncx = {W / 2}\ncy = {H / 2}\n"
            "x = -1.0\ny = 0.0\nz = 1.6\nyaw_deg = 180.0\npitch_deg = 5.0\n"
        )
    with open(os.path.join(out, "redline.toml"), "w") as f:
        f.write(
            "[sensors]\n"
            'odometry = "/localization/kinematic_state"\n'
            'tf_static = "/tf_static"\n'
            'calibration = "rig.toml"\n'
            "[[sensors.cameras]]\n"
            'name = "front"\n'
            'image = "/sensing/camera/front/image_raw/compressed"\n'
            'camera_info = "/sensing/camera/front/camera_info"\n'
            "[[sensors.cameras]]\n"
            'name = "rear"\n'
            'image = "/sensing/camera/rear/image_raw/compressed"\n'
        )
    print(json.dumps({"frames": FRAMES, "width": W, "height": H, "period_ns": PERIOD_NS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
