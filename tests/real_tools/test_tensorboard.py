"""TensorBoard event files between trainscope and the real tools (issue 28).

(a) What `trainscope train` writes in RUN/train/tb/rank0/ is read by TensorBoard's own
    readers: `event_accumulator.EventAccumulator` (the classic scalar API) and
    `plugin_event_accumulator.EventAccumulator` (what the TensorBoard server uses: each
    simple_value migrated to a "scalars"-plugin tensor). Both must give exactly the tags
    documented in docs/formats.md, the steps of RUN/train/metrics.rank0.jsonl, and each
    value equal to the metrics file's value rounded to float32.
    `trainscope.watch` (python/trainscope/monitor.py) writes no event files (only
    metrics.rank<R>.jsonl), so there is nothing of it to read here.
(b) Event files written by PyTorch's `torch.utils.tensorboard.SummaryWriter` (add_scalar of a
    loss curve and the learning rate; simple_value, and new_style float/double tensors) are
    read by `trainscope diagnose DIR --json`: one run, format "tensorboard", every point, and
    the curve class planted (healthy, loss spikes, NaN at a fixed step, diverging, diverging
    into NaN), with the same verdict and evidence as the same float32 values given as CSV.

Run with TS_BINARY=build/bin/trainscope and the project venv (tensorboard, torch, numpy).
"""
import csv
import glob
import json
import math
import os
import subprocess
import tempfile
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.util import tensor_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _cli import BINARY  # noqa: E402
CONFIG = os.path.join(REPO, "tests", "data", "train", "tiny_config.json")
ENV = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1", OMP_NUM_THREADS="1")


def f32(x):
    return float(np.float32(x))


# --- (a) trainscope train -> TensorBoard ---------------------------------------------------

# tag -> the step record's value (docs/formats.md "TensorBoard scalars")
TAGS = {
    "train/loss": lambda r: r["loss"],
    "train/lr": lambda r: r["lr"],
    "train/grad_norm": lambda r: r["grad_norm"],
    "train/tokens_per_s": lambda r: r["tokens_per_s"],
    "train/step_ms": lambda r: r["step_ms"],
    "phase/data_wait_ms": lambda r: r["phases_ms"]["data_wait"],
    "phase/h2d_ms": lambda r: r["phases_ms"]["h2d"],
    "phase/forward_ms": lambda r: r["phases_ms"]["forward"],
    "phase/backward_ms": lambda r: r["phases_ms"]["backward"],
    "phase/comm_wait_ms": lambda r: r["phases_ms"]["comm_wait"],
    "phase/optimizer_ms": lambda r: r["phases_ms"]["optimizer"],
    "comm/ms": lambda r: r["comm_ms"],
    "memory/rss_bytes": lambda r: r["host_rss_bytes"],
}
DEVICE_TAGS = {  # only where the device reports memory (null on the CPU)
    "memory/device_bytes": "device_mem_allocated_bytes",
    "memory/device_peak_bytes": "device_mem_peak_bytes",
}


@pytest.fixture(scope="module")
def train_run():
    with tempfile.TemporaryDirectory(prefix="ts-tb-") as tmp:
        run = os.path.join(tmp, "run")
        started = time.time()
        p = subprocess.run([BINARY, "train", "--config", CONFIG, "--run-dir", run, "--json"],
                           capture_output=True, text=True, env=ENV, timeout=120)
        ended = time.time()
        assert p.returncode == 0, p.stderr
        steps = []
        with open(os.path.join(run, "train", "metrics.rank0.jsonl")) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec["type"] == "step":
                    steps.append(rec)
        assert len(steps) == 8, len(steps)  # tiny_config.json's train.steps
        yield run, steps, (started, ended)


def expected_scalars(steps):
    """tag -> [(step, float32 value)] from the metrics file."""
    want = {tag: [(r["step"], f32(get(r))) for r in steps] for tag, get in TAGS.items()}
    for tag, key in DEVICE_TAGS.items():
        if any(r[key] is not None for r in steps):
            want[tag] = [(r["step"], f32(r[key])) for r in steps]
    return want


def test_event_accumulator_reads_train_run(train_run):
    run, steps, (started, ended) = train_run
    tb_dir = os.path.join(run, "train", "tb", "rank0")
    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    assert len(files) == 1, files
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    want = expected_scalars(steps)
    assert sorted(acc.Tags()["scalars"]) == sorted(want)
    assert acc.file_version == 2.0  # brain.Event:2
    for tag, points in want.items():
        events = acc.Scalars(tag)
        got = [(e.step, e.value) for e in events]
        assert got == points, (tag, got, points)
        for e in events:  # seconds since the epoch, within the run
            assert started - 1 <= e.wall_time <= ended + 1, (tag, e)
    # the loss moves: a reader that returned one number for every step would fail above
    assert len({v for _, v in want["train/loss"]}) > 1
    assert all(math.isfinite(v) and v > 0 for _, v in want["train/loss"])


def test_tensorboard_server_reader_sees_scalars(train_run):
    """plugin_event_accumulator is what `tensorboard --logdir` runs: each simple_value becomes
    a scalar tensor of the "scalars" plugin."""
    run, steps, _ = train_run
    tb_dir = os.path.join(run, "train", "tb", "rank0")
    acc = plugin_event_accumulator.EventAccumulator(
        tb_dir, size_guidance={plugin_event_accumulator.TENSORS: 0})
    acc.Reload()
    want = expected_scalars(steps)
    assert sorted(acc.Tags()["tensors"]) == sorted(want)
    assert sorted(acc.PluginTagToContent("scalars")) == sorted(want)
    for tag, points in want.items():
        got = [(e.step, tensor_util.make_ndarray(e.tensor_proto).item())
               for e in acc.Tensors(tag)]
        assert got == points, (tag, got, points)


def test_run_dir_is_one_tensorboard_run_per_rank(train_run):
    """`tensorboard --logdir RUN/train/tb` lists rank0 as its run."""
    run, steps, _ = train_run
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(os.path.join(run, "train", "tb"))
    mux.Reload()
    assert list(mux.Runs()) == ["rank0"]
    assert sorted(mux.PluginRunToTagToContent("scalars")["rank0"]) == \
        sorted(expected_scalars(steps))


# --- (b) SummaryWriter -> trainscope diagnose ----------------------------------------------

STEPS = 400


def healthy(steps):
    rng = np.random.default_rng(7)
    return 1.8 + 3.0 * np.exp(-steps / 80.0) + rng.normal(0, 0.02, len(steps))


def lr_schedule(steps, peak=3e-4, warmup=20):
    warm = peak * steps / warmup
    cos = 3e-5 + (peak - 3e-5) * 0.5 * (1 + np.cos(np.pi * (steps - warmup) / (STEPS - warmup)))
    return np.where(steps <= warmup, warm, cos)


def curve(shape):
    """(steps, loss) with the planted shape, and what diagnose must say about it."""
    s = np.arange(1, STEPS + 1)
    loss = healthy(s)
    if shape == "healthy":
        return s, loss, {"class": "healthy"}
    if shape == "spikes":
        for at in (150, 260):
            loss[at - 1] *= 2.5  # one bad batch each, the next step is back on the curve
        return s, loss, {"class": "loss_spikes", "spike_steps": [150, 260], "first_bad_step": 150}
    if shape == "nan":
        loss[250 - 1:260] = np.nan  # steps 250..260: NaN out of the blue
        s, loss = s[:260], loss[:260]
        return s, loss, {"class": "nan_fixed_step", "nan_step": 250, "first_bad_step": 250}
    if shape == "diverging":
        loss = loss + np.where(s > 150, 0.02 * (s - 150), 0)  # a steady rise from step 150
        return s, loss, {"class": "diverging", "first_bad_step": (130, 170)}
    if shape == "diverging_nan":
        loss = loss + np.where(s > 150, 0.02 * (s - 150), 0)
        loss[350 - 1:] = np.nan
        return s[:355], loss[:355], {"class": "diverging", "nan_step": 350,
                                     "nan_after_divergence": True, "first_bad_step": (130, 170)}
    raise ValueError(shape)


def write_summary(log_dir, steps, loss, lr, loss_tag, lr_tag, style):
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(log_dir=log_dir)
    for st, lv, rv in zip(steps.tolist(), loss.tolist(), lr.tolist()):
        kw = {} if style == "simple" else {"new_style": True,
                                           "double_precision": style == "double"}
        w.add_scalar(loss_tag, lv, st, **kw)
        w.add_scalar(lr_tag, rv, st, **kw)
    w.close()


def diagnose(*args):
    p = subprocess.run([BINARY, "diagnose", *args, "--json"], capture_output=True, text=True,
                       env=ENV, timeout=60)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def peak_lr_rules(path, equal_to, not_equal_to):
    """A rule file (docs/formats.md "Diagnose rules") whose two rules fire when the peak LR
    diagnose read (run.lr) is exactly `equal_to`, or `not_equal_to`."""
    def rule(rule_id, value):
        return {"id": rule_id, "layer": "model", "severity": "info", "needs": ["run.lr"],
                "condition": f"run.lr == {value!r}", "symptom": "-", "cause": "-",
                "check": "-", "title": "peak lr {run.lr}", "fix": "-"}
    with open(path, "w") as fh:
        json.dump({"format": "trainscope.diagnose.rules", "version": 1, "comment": "test",
                   "rules": [rule("test.lr_read", equal_to),
                             rule("test.lr_other", not_equal_to)]}, fh)


@pytest.fixture
def work():
    with tempfile.TemporaryDirectory(prefix="ts-tb-") as d:
        yield d


CASES = [  # (shape, loss tag, lr tag, how SummaryWriter stores the value)
    ("healthy", "loss", "lr", "simple"),
    ("healthy", "train/loss", "train/learning_rate", "float"),
    ("spikes", "train/loss", "train/learning_rate", "simple"),
    ("nan", "Loss/train", "lr", "simple"),
    ("diverging", "train/loss", "learning_rate", "double"),
    ("diverging_nan", "train_loss", "lr", "simple"),
]
SEVERITY = {"healthy": "info", "loss_spikes": "warning", "nan_fixed_step": "error",
            "diverging": "error"}


@pytest.mark.parametrize("shape,loss_tag,lr_tag,style", CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_diagnose_reads_summary_writer(shape, loss_tag, lr_tag, style, work):
    steps, loss, want = curve(shape)
    lr = lr_schedule(steps)
    log_dir = os.path.join(work, "tb")
    write_summary(log_dir, steps, loss, lr, loss_tag, lr_tag, style)
    assert len(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))) == 1

    rc, rep = diagnose(log_dir)
    assert len(rep["runs"]) == 1, rep["runs"]
    run = rep["runs"][0]
    assert run["format"] == "tensorboard" and "tfevents" in run["path"], run
    assert run["loss_points"] == len(steps), run
    assert (run["first_step"], run["last_step"]) == (int(steps[0]), int(steps[-1])), run
    assert run["bad_records"] == 0, run
    c = run["curve"]
    assert c["class"] == want["class"], (shape, c)
    for key in ("nan_step", "spike_steps", "nan_after_divergence"):
        if key in want:
            assert c.get(key) == want[key], (shape, key, c)
    if isinstance(want.get("first_bad_step"), tuple):
        lo, hi = want["first_bad_step"]
        assert lo <= c["first_bad_step"] <= hi, (shape, c)
    elif "first_bad_step" in want:
        assert c["first_bad_step"] == want["first_bad_step"], (shape, c)
    severity = SEVERITY[want["class"]]
    curve_findings = [(f["id"], f["severity"]) for f in rep["findings"]
                      if f["id"].startswith("curve.")]
    assert curve_findings == [("curve." + want["class"], severity)], rep["findings"]
    assert rc == (1 if severity == "error" else 0), (rc, rep["findings"])

    # The same values as a CSV (float32 unless SummaryWriter kept doubles): the same verdict
    # with the same evidence, to the last bit.
    cast = float if style == "double" else f32
    csv_path = os.path.join(work, "metrics.csv")
    with open(csv_path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["step", "loss", "lr"])
        for st, lv, rv in zip(steps.tolist(), loss.tolist(), lr.tolist()):
            out.writerow([st, "nan" if math.isnan(lv) else repr(cast(lv)), repr(cast(rv))])
    _, rep_csv = diagnose(csv_path)
    assert rep_csv["runs"][0]["curve"] == c, (rep_csv["runs"][0]["curve"], c)
    assert [(f["id"], f["severity"]) for f in rep_csv["findings"]] == \
        [(f["id"], f["severity"]) for f in rep["findings"]]

    # The LR tag is read too: the peak LR diagnose uses is the written value, exactly.
    peak = float(lr.max())
    rules = os.path.join(work, "rules.json")
    peak_lr_rules(rules, cast(peak), f32(peak) if style == "double" else peak)
    _, rep_lr = diagnose(log_dir, "--rules", rules)
    ids = [f["id"] for f in rep_lr["findings"]]
    assert "test.lr_read" in ids and "test.lr_other" not in ids, rep_lr["findings"]
