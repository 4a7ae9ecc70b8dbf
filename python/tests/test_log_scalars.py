"""mon.log as a user's loop calls it (issue 33 part 3): scalars inside a step, an evaluation
logged after or between steps with step=, non-finite and numpy values, and the TensorBoard
files watch writes as `trainscope train` does."""
import glob
import json
import os

import numpy as np
import pytest
import torch

import trainscope


def records(run_dir):
    with open(os.path.join(run_dir, "train", "metrics.rank0.jsonl")) as f:
        return [json.loads(line) for line in f]


def loop(run_dir, steps=4, **watch_kw):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    mon = trainscope.watch(net, opt, run_dir=run_dir, **watch_kw)
    for step in range(1, steps + 1):
        with mon.step(tokens=4):
            out = net(torch.randn(4, 4))
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            mon.log(loss=loss, accuracy=torch.tensor(step / 10.0), bad=float("nan"),
                    count=np.int64(step), tag="text")
            if step == 2:
                mon.log(step=1, late=7.0)  # inside a step, for another one
        if step % 2 == 0:
            mon.log(step=step, val_loss=1.0 / step)  # an evaluation after the step
    mon.log(val_loss=0.1)  # between steps, no step=: the last completed one
    return mon


def test_scalars_in_and_after_steps(run_dir):
    mon = loop(run_dir)
    with pytest.raises(trainscope.Error, match="outside"):
        mon.log(loss=1.0)  # a training loss belongs to its step
    with pytest.raises(trainscope.Error, match="numbered from 1"):
        mon.log(step=-1, val_loss=1.0)
    mon.close()
    recs = records(run_dir)
    steps = [r for r in recs if r["type"] == "step"]
    assert [r["scalars"]["accuracy"] for r in steps] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert all(r["scalars"]["bad"] is None for r in steps)  # NaN written as null, not refused
    assert [r["scalars"]["count"] for r in steps] == [1, 2, 3, 4]
    assert steps[0]["scalars"]["tag"] == "text"
    logged = [(r["step"], r["scalars"]) for r in recs if r["type"] == "scalars"]
    assert logged == [(1, {"late": 7.0}), (2, {"val_loss": 0.5}), (4, {"val_loss": 0.25}),
                      (4, {"val_loss": 0.1})]
    assert all(r["lr"] == 0.1 for r in steps)


def test_report_draws_the_logged_scalars(run_dir, tmp_path):
    import subprocess
    from conftest import trainscope_binary
    loop(run_dir).close()
    p = subprocess.run([trainscope_binary(), "report", run_dir, "-o", str(tmp_path / "r.html"),
                        "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert {"accuracy", "bad", "count", "late", "val_loss"} <= set(summary["scalars"])
    assert "scalars" in summary["sections"] and "val_loss" in summary["sections"]


def test_tensorboard_files(run_dir, tmp_path):
    loop(run_dir).close()
    files = glob.glob(os.path.join(run_dir, "train", "tb", "rank0", "events.out.tfevents.*"))
    assert len(files) == 1
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(files[0], size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/step_ms",
                "phase/forward_ms", "comm/ms", "memory/rss_bytes", "accuracy", "count"):
        assert [e.step for e in acc.Scalars(tag)] == [1, 2, 3, 4], tag
    assert [e.value for e in acc.Scalars("accuracy")] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert [(e.step, e.value) for e in acc.Scalars("val_loss")] == \
        [(2, 0.5), (4, 0.25), (4, pytest.approx(0.1))]
    assert "tag" not in tags  # a string is kept in the metrics file, not drawn
    other = str(tmp_path / "no_tb")
    loop(other, tensorboard=False).close()
    assert not os.path.exists(os.path.join(other, "train", "tb"))
