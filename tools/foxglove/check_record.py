#!/usr/bin/env python3
"""Reads a `redline replay --record` MCAP file back with the reference Python MCAP reader,
decodes every message with the Foxglove schemas, and checks it against the replay's
report.json.

    python3 tools/foxglove/check_record.py OUT.mcap REPORT_DIR/report.json

Needs: mcap, mcap-protobuf-support, foxglove-schemas-protobuf (`.ci/run` installs them).

Two decoders, so that a wrong schema cannot hide: the protobuf messages are decoded by
mcap-protobuf-support from the FileDescriptorSet stored in the file, and parsed again with
the classes of foxglove-schemas-protobuf (Foxglove's published schemas); both must agree.
Exits 1 with the list of failed checks, else prints what it checked.
"""

import collections
import json
import sys

from mcap.decoder import DecoderFactory as McapDecoderFactory
from mcap.reader import make_reader
from mcap_protobuf.decoder import DecoderFactory
from foxglove_schemas_protobuf.CameraCalibration_pb2 import CameraCalibration
from foxglove_schemas_protobuf.CompressedImage_pb2 import CompressedImage
from foxglove_schemas_protobuf.FrameTransform_pb2 import FrameTransform
from foxglove_schemas_protobuf.Grid_pb2 import Grid
from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate

EXPECTED = {
    "/tf": ("foxglove.FrameTransform", "protobuf", FrameTransform),
    "/redline/detections": ("foxglove.SceneUpdate", "protobuf", SceneUpdate),
    "/redline/tracks": ("foxglove.SceneUpdate", "protobuf", SceneUpdate),
    "/redline/predictions": ("foxglove.SceneUpdate", "protobuf", SceneUpdate),
    "/redline/plan": ("foxglove.SceneUpdate", "protobuf", SceneUpdate),
    "/redline/bev_segmentation": ("foxglove.Grid", "protobuf", Grid),
    "/redline/frame": ("redline.FrameStats", "json", None),
}


def jpeg_size(data):
    """(width, height) from a baseline JPEG's SOF0 segment, or None."""
    if data[:2] != b"\xff\xd8" or data[-2:] != b"\xff\xd9":
        return None
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker, length = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        i += 2 + length
    return None


def expected(topic):
    if topic.startswith("/camera/") and topic.endswith("/image/compressed"):
        return ("foxglove.CompressedImage", "protobuf", CompressedImage)
    if topic.startswith("/camera/") and topic.endswith("/calibration"):
        return ("foxglove.CameraCalibration", "protobuf", CameraCalibration)
    if topic == "/tf_static":
        return ("foxglove.FrameTransform", "protobuf", FrameTransform)
    return EXPECTED.get(topic, (None, None, None))


class JsonDecoderFactory(McapDecoderFactory):
    """JSON messages (the per-frame facts on /redline/frame)."""

    def decoder_for(self, message_encoding, schema):
        if message_encoding == "json":
            return json.loads
        return None


def main(mcap_path, report_path):
    report = json.load(open(report_path))
    rt, rec, ev = report["runtime"], report["record"], report["evaluation"]
    fails, notes = [], []

    def check(ok, what):
        (notes if ok else fails).append(("ok   " if ok else "FAIL ") + what)

    msgs = collections.defaultdict(list)  # topic -> [(log_time, official, dynamic)]
    with open(mcap_path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory(), JsonDecoderFactory()])
        summary = reader.get_summary()
        topics = {c.topic: c for c in summary.channels.values()}
        for topic, (schema_name, encoding, _) in EXPECTED.items():
            c = topics.get(topic)
            check(c is not None, f"channel {topic} present")
            if c is not None:
                s = summary.schemas[c.schema_id]
                check(
                    s.name == schema_name and c.message_encoding == encoding,
                    f"{topic}: schema {s.name} ({c.message_encoding})",
                )
        for schema, channel, message, decoded in reader.iter_decoded_messages():
            cls = expected(channel.topic)[2]
            if cls is None:
                official = decoded
            else:
                official = cls.FromString(message.data)
                # The FileDescriptorSet in the file and Foxglove's own classes agree.
                if decoded.SerializeToString(deterministic=True) != official.SerializeToString(
                    deterministic=True
                ):
                    fails.append(f"FAIL {channel.topic}: the two protobuf decoders disagree")
            msgs[channel.topic].append((message.log_time, official))

    frames = [m for _, m in msgs["/redline/frame"]]
    n = len(frames)
    written, dropped = rec["frames_written"], rec["frames_dropped"]
    check(n == written, f"{n} /redline/frame messages = report record.frames_written {written}")
    check(
        written + dropped == rt["frames_published"],
        f"written {written} + dropped {dropped} = frames published {rt['frames_published']}",
    )
    for topic in ["/redline/detections", "/redline/tracks", "/redline/predictions", "/redline/plan"]:
        check(len(msgs[topic]) == n, f"{topic}: {len(msgs[topic])} messages, one per frame")
    times = [t for t, _ in msgs["/redline/frame"]]
    check(times == sorted(times), "log times never go backwards")
    nums = [m["frame"] for m in frames]
    check(nums == sorted(set(nums)), "frames in publish order, each once")

    if dropped == 0:
        # Every published frame is in the file: the report's counts must be reproduced.
        misses = sum(m["deadline_miss"] for m in frames)
        check(misses == rt["deadline_misses"], f"deadline misses {misses} = report {rt['deadline_misses']}")
        status = collections.Counter(m["status"] for m in frames)
        check(
            status["complete"] == rt["frames_complete"] and status["degraded"] == rt["frames_degraded"],
            f"complete {status['complete']} / degraded {status['degraded']} = report "
            f"{rt['frames_complete']} / {rt['frames_degraded']}",
        )
        dets = sum(
            len(u.entities) for _, u in msgs["/redline/detections"]
        )
        check(
            abs(dets / n - ev["mean_detections"]) < 1e-9,
            f"mean detections {dets / n:.4f} = report {ev['mean_detections']:.4f}",
        )
        min_risk = sum(m["plan_kind"] == 1 for m in frames)
        check(
            min_risk == ev["minimum_risk_frames"],
            f"minimum-risk frames {min_risk} = report {ev['minimum_risk_frames']}",
        )
        e2e = rt["end_to_end"]
        top = max(m["latency_ms"] for m in frames) * 1e6
        check(
            abs(top - e2e["max_ns"]) <= 0.01 * e2e["max_ns"],
            f"max latency {top / 1e6:.3f} ms = report end_to_end.max {e2e['max_ns'] / 1e6:.3f} ms "
            "(within the histogram's 1%)",
        )
    else:
        notes.append(f"note {dropped} frames dropped: per-frame totals not compared")

    names = [r["mode"] for r in rt["mode_residency"]]
    check(
        all(m["mode_name"] == names[m["mode"]] for m in frames if m["mode"] < len(names)),
        f"mode index and mode_name agree with the report's modes {names}",
    )
    per_mode = collections.Counter(m["mode_name"] for m in frames)
    slots = rt["frame_slots"]
    check(
        dropped > 0
        or all(abs(per_mode[r["mode"]] - r["frames"]) <= slots for r in rt["mode_residency"]),
        f"frames per mode {dict(per_mode)} match the report's residency (the ladder sees the "
        f"last {slots} frames' outcomes after the run)",
    )

    # Tracks: stable ids, labels carry them; predictions refer to tracks of the same frame.
    ids = set()
    bad_labels = 0
    for (_, tracks), (_, preds) in zip(msgs["/redline/tracks"], msgs["/redline/predictions"]):
        frame_ids = set()
        for e in tracks.entities:
            tid = e.id.split("/")[1]
            frame_ids.add(tid)
            bad_labels += not (e.frame_id == "map" and e.texts[0].text.endswith("#" + tid) and len(e.cubes) == 1)
        ids |= frame_ids
        bad_labels += sum(e.id.split("/")[1] not in frame_ids for e in preds.entities)
    check(bad_labels == 0, f"{len(ids)} track ids, each labelled `<class> #<id>` with a box and its predicted path")

    grids = [g for _, g in msgs["/redline/bev_segmentation"]]
    good = all(
        g.frame_id == "base_link"
        and g.column_count * (len(g.data) // g.row_stride) == len(g.data)
        and g.fields[0].name == "class"
        and set(g.data) <= {0, 1, 2}
        for g in grids
    )
    shape = f"{grids[0].column_count}x{len(grids[0].data) // grids[0].row_stride}" if grids else "-"
    check(len(grids) > 0 and good, f"{len(grids)} BEV grids ({shape} cells, uint8 class 0..2, base_link)")
    tfs = [t for _, t in msgs["/tf"]]
    check(
        len(tfs) == n and all(t.parent_frame_id == "map" and t.child_frame_id == "base_link" for t in tfs),
        f"{len(tfs)} map -> base_link transforms",
    )
    plans = sum(any(e.id == "plan" and len(e.lines[0].points) > 1 for e in u.entities) for _, u in msgs["/redline/plan"])
    check(plans > 0, f"{plans} frames with a planned path")

    cams = sorted(t for t in topics if expected(t)[2] is CompressedImage)
    stats = rec.get("images")
    if stats is None:
        check(not cams, "no camera topics without --record-images")
    else:
        for t in cams:
            s = summary.schemas[topics[t].schema_id]
            check(s.name == "foxglove.CompressedImage", f"{t}: schema {s.name}")
        count = sum(len(msgs[t]) for t in cams)
        check(
            count == stats["images_written"] and count > 0,
            f"{count} camera images on {len(cams)} topics = report record.images.images_written",
        )
        w, h = report["graph"]["image"]
        sizes = collections.Counter(
            jpeg_size(m.data) if m.format == "jpeg" else None for t in cams for _, m in msgs[t]
        )
        check(
            set(sizes) == {(w, h)},
            f"every image a {w}x{h} JPEG (SOI..EOI, SOF size): {dict(sizes)}",
        )
        ids = {m.frame_id for t in cams for _, m in msgs[t]}
        check(
            all(f"cam_{t.split('/')[2]}" in ids for t in cams),
            "frame ids cam_<name> match the topics",
        )
        # Calibrations and mounts beside the images: Foxglove's Image panel draws the 3D
        # scene over a camera with them.
        names = sorted(t.split("/")[2] for t in cams)
        cals = {n: [m for _, m in msgs[f"/camera/{n}/calibration"]] for n in names}
        check(
            all(
                cals[n]
                and all(
                    c.frame_id == f"cam_{n}" and (c.width, c.height) == (w, h) and c.K[0] > 0
                    and len(c.K) == 9 and len(c.P) == 12 and c.distortion_model
                    for c in cals[n]
                )
                for n in names
            ),
            f"every camera has calibrations ({w}x{h}, K, P, cam_<name>) on /camera/<name>/calibration",
        )
        mounts = {m.child_frame_id for _, m in msgs["/tf_static"] if m.parent_frame_id == "base_link"}
        check(
            mounts >= {f"cam_{n}" for n in names},
            f"base_link -> cam_<name> mounts on /tf_static for {len(names)} cameras",
        )

    for line in notes + fails:
        print(line)
    total = sum(len(v) for v in msgs.values())
    print(f"{mcap_path}: {total} messages on {len(msgs)} topics, {n} frames; "
          f"{len(notes)} checks passed, {len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
