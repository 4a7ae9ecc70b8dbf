#!/usr/bin/env python3
"""`trainscope train` writes TensorBoard scalars (issue 17): a short run leaves
<run>/train/tb/rank0/events.out.tfevents.<unix s>.<host>, which

  * an independent reader written here from the format's description (TFRecord framing with
    masked CRC32C, CRC32C computed bit by bit; the few protobuf fields of Event, Summary and
    Summary.Value decoded by hand) reads with every CRC correct: file_version "brain.Event:2"
    first, then one event per step whose train/loss, train/lr and train/grad_norm are the
    metrics file's values rounded to float32, and the other documented tags;
  * `trainscope diagnose FILE --json` reads, with the run's loss points;

and `trainscope diagnose RUN_DIR` skips train/tb (the same steps as the metrics file beside
it). TensorBoard itself is not packaged in Debian bookworm, hence the reader here.
"""
import argparse
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ CRC32C_POLY if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    pos = 0
    while pos < len(blob):
        assert pos + 12 <= len(blob), f"byte {pos}: cut-short header"
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        assert len_crc == masked_crc(header), f"byte {pos}: length CRC"
        data = blob[pos + 12:pos + 12 + length]
        assert len(data) == length, f"byte {pos}: cut-short data"
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked_crc(data), f"byte {pos}: data CRC"
        yield data
        pos += 16 + length


def varint(buf, pos):
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, pos


def fields(buf):
    """(field number, wire type, value) of a protobuf message: ints, bytes, raw fixed."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise AssertionError(f"wire type {wt}")
        yield num, wt, v


def parse_event(buf):
    ev = {"step": 0, "values": {}}
    for num, wt, v in fields(buf):
        if num == 1 and wt == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            ev["step"] = v
        elif num == 3 and wt == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            for snum, swt, sv in fields(v):
                assert snum == 1 and swt == 2, "Summary has only values"
                tag, value = None, None
                for vnum, vwt, vv in fields(sv):
                    if vnum == 1:
                        tag = vv.decode()
                    elif vnum == 2 and vwt == 5:
                        value = struct.unpack("<f", vv)[0]
                assert tag is not None and value is not None, "a simple_value scalar"
                ev["values"][tag] = value
    return ev


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    assert crc32c(b"123456789") == 0xE3069283  # the reader's own check value
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        p = subprocess.run([args.binary, "train", "--config", args.config, "--run-dir", run,
                            "--json"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        files = glob.glob(os.path.join(run, "train", "tb", "rank0", "events.out.tfevents.*"))
        assert len(files) == 1, files
        name = os.path.basename(files[0])
        assert name.split(".")[3].isdigit(), name  # events.out.tfevents.<unix s>.<host>
        with open(files[0], "rb") as fh:
            events = [parse_event(r) for r in records(fh.read())]
        assert events[0].get("file_version") == "brain.Event:2", events[0]
        steps = {}
        with open(os.path.join(run, "train", "metrics.rank0.jsonl")) as fh:
            for line in fh:
                j = json.loads(line)
                if j["type"] == "step":
                    steps[j["step"]] = j
        assert len(events) == 1 + len(steps), (len(events), len(steps))
        for ev in events[1:]:
            rec = steps[ev["step"]]
            v = ev["values"]
            assert v["train/loss"] == f32(rec["loss"]), (ev["step"], v["train/loss"], rec["loss"])
            assert v["train/lr"] == f32(rec["lr"]), ev
            assert v["train/grad_norm"] == f32(rec["grad_norm"]), ev
            assert v["phase/forward_ms"] == f32(rec["phases_ms"]["forward"]), ev
            assert v["memory/rss_bytes"] == f32(rec["host_rss_bytes"]), ev
            for tag in ("train/tokens_per_s", "train/step_ms", "phase/data_wait_ms",
                        "phase/h2d_ms", "phase/backward_ms", "phase/comm_wait_ms",
                        "phase/optimizer_ms", "comm/ms"):
                assert tag in v and math.isfinite(v[tag]), (tag, ev)
            assert "memory/device_bytes" not in v  # CPU: the device reports no memory
            assert abs(ev["wall_time"] - events[0]["wall_time"]) < 600, ev
        print(f"{name}: {len(events)} events, every CRC correct, values = metrics file")

        d = subprocess.run([args.binary, "diagnose", files[0], "--json"], capture_output=True,
                           text=True, timeout=60)
        assert d.returncode in (0, 1), d.stderr
        rep = json.loads(d.stdout)
        assert len(rep["runs"]) == 1 and rep["runs"][0]["format"] == "tensorboard", rep["runs"]
        assert rep["runs"][0]["loss_points"] == len(steps), rep["runs"][0]
        assert rep["runs"][0]["last_step"] == max(steps), rep["runs"][0]

        d = subprocess.run([args.binary, "diagnose", run, "--json"], capture_output=True,
                           text=True, timeout=60)
        assert d.returncode in (0, 1), d.stderr
        rep = json.loads(d.stdout)
        formats = [r["format"] for r in rep["runs"]]
        assert "tensorboard" not in formats, formats
        assert any(s["path"].endswith(os.path.join("train", "tb")) for s in rep["skipped"]), \
            rep["skipped"]
        print("diagnose reads the event file; skips train/tb beside the metrics files")

        # train.tensorboard false: no event file.
        with open(args.config) as fh:
            cfg = json.load(fh)
        cfg["train"]["tensorboard"] = False
        cfg["data"]["corpus"] = [os.path.join(os.path.dirname(os.path.abspath(args.config)), c)
                                 for c in cfg["data"]["corpus"]]
        off_cfg = os.path.join(tmp, "off.json")
        with open(off_cfg, "w") as fh:
            json.dump(cfg, fh)
        off = os.path.join(tmp, "off")
        p = subprocess.run([args.binary, "train", "--config", off_cfg, "--run-dir", off, "--json"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert not os.path.exists(os.path.join(off, "train", "tb")), os.listdir(
            os.path.join(off, "train"))
        print("train.tensorboard false: no train/tb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
