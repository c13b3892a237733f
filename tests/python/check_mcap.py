#!/usr/bin/env python3
"""Independent check of a redline sensor log with the reference MCAP/ROS 2 Python stack.

Usage: python3 tests/python/check_mcap.py LOG.mcap

Decodes every message of LOG with the PyPI packages `mcap` and `mcap-ros2-support` (which
parse our `ros2msg` schema text and CDR payloads without any redline code) and prints one JSON
object on stdout:

  {"profile": ..., "messages": N, "topics": {topic: count, ...},
   "schemas": {topic: schema name, ...},
   "first": {topic: {a few decoded values of the first message}, ...}}

Exit status: 0 on success, 1 when a message cannot be decoded, 2 on bad usage, 3 when the
Python packages are missing (the message says how to install them).
"""

import json
import sys


def first_values(schema, msg):
    """A few decoded fields of a message, by schema name."""
    if schema == "sensor_msgs/msg/Image":
        return {
            "width": msg.width,
            "height": msg.height,
            "encoding": msg.encoding,
            "step": msg.step,
            "frame_id": msg.header.frame_id,
            "data_len": len(msg.data),
            "data_head": list(bytes(msg.data[:12])),
        }
    if schema == "sensor_msgs/msg/CameraInfo":
        return {"width": msg.width, "height": msg.height, "k": list(msg.k)}
    if schema == "nav_msgs/msg/Odometry":
        p = msg.pose.pose
        return {
            "stamp_ns": msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec,
            "frame_id": msg.header.frame_id,
            "child_frame_id": msg.child_frame_id,
            "x": p.position.x,
            "y": p.position.y,
            "qz": p.orientation.z,
            "qw": p.orientation.w,
        }
    if schema == "redline_msgs/msg/GroundTruth":
        out = {"count": len(msg.objects)}
        if msg.objects:
            o = msg.objects[0]
            out.update({"id": o.id, "class": getattr(o, "class"),
                        "x": o.x, "y": o.y})
        return out
    if schema == "redline_msgs/msg/RoadMap":
        return {
            "lanes": msg.lanes,
            "lane_width": msg.lane_width,
            "first_centre": [msg.centre_x[0], msg.centre_y[0]] if len(msg.centre_x) else None,
            "points": len(msg.centre_x),
        }
    if schema == "tf2_msgs/msg/TFMessage":
        return {
            "transforms": len(msg.transforms),
            "children": [t.child_frame_id for t in msg.transforms],
        }
    return {}


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from mcap.reader import make_reader
        from mcap_ros2.decoder import DecoderFactory
    except ImportError as e:
        print(
            f"missing Python package ({e}); install with: pip install mcap mcap-ros2-support",
            file=sys.stderr,
        )
        return 3

    topics, schemas, first = {}, {}, {}
    total = 0
    with open(argv[1], "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        profile = reader.get_header().profile
        try:
            for schema, channel, _message, decoded in reader.iter_decoded_messages():
                total += 1
                topics[channel.topic] = topics.get(channel.topic, 0) + 1
                if channel.topic not in first:
                    schemas[channel.topic] = schema.name
                    first[channel.topic] = first_values(schema.name, decoded)
        except Exception as e:  # noqa: BLE001 - report any decoding failure, with context
            print(f"decoding failed after {total} messages: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    print(json.dumps({"profile": profile, "messages": total, "topics": topics,
                      "schemas": schemas, "first": first}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
