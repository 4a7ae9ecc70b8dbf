"""trainscope.watch: metrics in the trainer's format, the NaN tracer, bad input."""
import json
import math
import os
import subprocess

import pytest
import torch

import trainscope
from conftest import trainscope_binary


class Net(torch.nn.Module):
    """Three linear layers; `inject` = the step at which layer2's output is made NaN."""

    def __init__(self, inject=0, where="forward"):
        super().__init__()
        torch.manual_seed(0)
        self.layer1 = torch.nn.Linear(16, 32)
        self.layer2 = torch.nn.Linear(32, 32)
        self.layer3 = torch.nn.Linear(32, 4)
        self.step = 0
        if inject and where == "forward":
            self.layer2.register_forward_hook(
                lambda m, i, o: o * float("nan") if self.step == inject else None)
        if inject and where == "backward":
            self.layer2.weight.register_hook(
                lambda g: g * float("inf") if self.step == inject else None)

    def forward(self, x):
        return self.layer3(torch.relu(self.layer2(torch.relu(self.layer1(x)))))


def train(net, mon, opt, steps, log_loss=True):
    for step in range(1, steps + 1):
        net.step = step
        with mon.step(tokens=8, sample_ids=range(8 * step, 8 * step + 8)):
            with mon.phase("data"):
                x, y = torch.randn(8, 16), torch.randn(8, 4)
            with mon.phase("forward"):
                loss = torch.nn.functional.mse_loss(net(x), y)
            with mon.phase("backward"):
                opt.zero_grad()
                loss.backward()
            with mon.phase("optimizer"):
                opt.step()
            if log_loss:
                mon.log(loss=loss.item())


def records(run_dir):
    with open(os.path.join(run_dir, "train", "metrics.rank0.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_clean_run_metrics_read_by_diagnose(run_dir):
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    mon = trainscope.watch(net, opt, run_dir=run_dir, layer_norms_every=4)
    train(net, mon, opt, 8)
    mon.close()
    recs = records(run_dir)
    head = recs[0]
    assert head["type"] == "header" and head["format"] == "trainscope.train_metrics"
    assert head["rank"] == 0 and head["world_size"] == 1
    assert head["params"] == sum(p.numel() for p in net.parameters())
    steps = [r for r in recs if r["type"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 9))
    for r in steps:
        assert math.isfinite(r["loss"]) and r["grad_norm"] > 0 and r["lr"] == 0.05
        assert r["step_ms"] >= sum(r["phases_ms"][k] for k in ("data_wait", "forward",
                                                                 "backward", "optimizer"))
        assert r["tokens"] == 8 and r["tokens_per_s"] > 0 and r["host_rss_bytes"] > 0
        assert len(r["data_order_hash"]) == 16
    assert len({r["data_order_hash"] for r in steps}) == 8  # a running hash of the ids
    norms = [r for r in recs if r["type"] == "layer_norms"]
    assert [r["step"] for r in norms] == [1, 4, 8]
    assert [l["name"] for l in norms[0]["layers"]] == [n for n, _ in net.named_parameters()]
    # the global norm is the norm of the per-layer norms
    g = math.sqrt(sum(l["grad_norm"] ** 2 for l in norms[1]["layers"]))
    assert g == pytest.approx(steps[3]["grad_norm"], rel=1e-5)
    assert recs[-1] == {**recs[-1], "type": "end", "reason": "done", "step": 8}
    checks = recs[-2]
    assert checks["type"] == "nonfinite_checks" and 0 < checks["check_ms"] < checks["loop_ms"]
    for verb in (["diagnose", run_dir, "--json"], ["trace", "analyze", run_dir, "--json"]):
        p = subprocess.run([trainscope_binary()] + verb, capture_output=True, text=True)
        assert p.returncode in (0, 1), (verb, p.stderr)
        out = json.loads(p.stdout)
        if verb[0] == "diagnose":
            assert out["runs"][0]["loss_points"] == 8 and out["runs"][0]["end_reason"] == "done"


def test_report_reads_the_run(run_dir):
    help_ = subprocess.run([trainscope_binary(), "report", "--help"], capture_output=True)
    if help_.returncode != 0:
        pytest.skip("this build has no `trainscope report` verb yet")
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with trainscope.watch(net, opt, run_dir=run_dir) as mon:
        train(net, mon, opt, 4)
    p = subprocess.run([trainscope_binary(), "report", run_dir, "--json"], capture_output=True,
                       text=True)
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert out["malformed"] == 0 and out["ranks"] == 1, out
    assert {"loss", "lr", "grad_norm", "phases"} <= set(out["sections"]), out["sections"]


def test_nan_in_layer2_forward_at_step_7(run_dir):
    net = Net(inject=7)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    with pytest.raises(trainscope.NonFiniteError) as e:
        train(net, mon, opt, 10)
    err = e.value
    assert (err.step, err.rank, err.phase, err.module, err.parameter) == \
        (7, 0, "forward", "layer2", "")
    assert "step 7" in str(err) and "layer2" in str(err)
    assert net.step == 7  # raised at the step it happened
    recs = records(run_dir)
    nf = [r for r in recs if r["type"] == "nonfinite"]
    assert len(nf) == 1 and nf[0]["module"] == "layer2" and nf[0]["step"] == 7
    assert nf[0]["reproducible"] is True and nf[0]["class"] == "operator"
    assert nf[0]["samples"] == list(range(56, 64))
    assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "error"
    assert [r["step"] for r in recs if r["type"] == "step"] == list(range(1, 7))
    with pytest.raises(trainscope.Error, match="closed Monitor"):
        mon.log(loss=1.0)
    # the trainer's validator accepts the file (diagnose reads it as a trainscope log)
    p = subprocess.run([trainscope_binary(), "diagnose", run_dir, "--json"], capture_output=True,
                       text=True)
    assert p.returncode in (0, 1), p.stderr


def test_nan_gradient_without_logged_loss(run_dir):
    # The loss is finite; layer2.weight's gradient is made Inf in backward at step 3: the
    # gradient check before optimizer.step() finds it and names the parameter.
    net = Net(inject=3, where="backward")
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    before = [p.detach().clone() for p in net.parameters()]
    with pytest.raises(trainscope.NonFiniteError) as e:
        train(net, mon, opt, 5, log_loss=False)
    assert (e.value.step, e.value.phase, e.value.module, e.value.parameter) == \
        (3, "backward", "layer2", "layer2.weight")
    # the optimizer did not step with the bad gradients
    assert all(torch.isfinite(p).all() for p in net.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(before, net.parameters()))


def _nan_after_lr_change(run_dir, change_at, inject):
    """Raises the LR 20x from step `change_at` on; layer2's output is NaN at step `inject`."""
    net = Net(inject=inject)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    with pytest.raises(trainscope.NonFiniteError):
        for step in range(1, inject + 1):
            if step == change_at:
                opt.param_groups[0]["lr"] = 0.02
            net.step = step
            with mon.step(tokens=8):
                loss = torch.nn.functional.mse_loss(net(torch.randn(8, 16)), torch.randn(8, 4))
                opt.zero_grad()
                loss.backward()
                opt.step()
                mon.log(loss=loss.item())
    return [r for r in records(run_dir) if r["type"] == "nonfinite"][0]


def test_lr_jump_classified_by_the_trainers_rules(run_dir, tmp_path):
    # The same rule as the trainer (diagnose/nonfinite.cc): a >= 5x LR jump within this step
    # and the two before it; the fix in plain words, no trainer config keys.
    rec = _nan_after_lr_change(run_dir, change_at=5, inject=5)
    assert (rec["step"], rec["module"], rec["class"]) == (5, "layer2", "lr_too_high")
    assert rec["fix"].startswith("the learning rate jumped 20x at step 5: lower the learning rate")
    assert "optim." not in rec["fix"]
    # A jump four steps back is a schedule change the weights have lived with: an operator.
    rec = _nan_after_lr_change(str(tmp_path / "later"), change_at=2, inject=6)
    assert (rec["step"], rec["class"]) == (6, "operator")


def test_classify_nonfinite_is_the_trainers(run_dir):
    c = trainscope._core.classify_nonfinite
    assert c(phase="optimizer") == (
        "lr_too_high", "finite gradients gave non-finite weights, so the update itself "
        "overflowed: lower the learning rate (and check the optimizer's eps is not tiny)")
    assert c(phase="optimizer", wording="trainer")[1].endswith(
        "lower optim.lr (and check optim.eps is not tiny)")
    assert c(phase="forward", module="wte", embedding_output=True)[0] == "bad_data"
    assert c(phase="forward", replayed=True, reproducible=False)[0] == "transient"
    assert c(phase="forward", fp16=True, max_abs_activation=7e4)[0] == "fp16_overflow"
    assert c(phase="forward", max_abs_activation=7e4)[0] == "operator"
    assert c(phase="backward", grad_norms=[1.0, float("nan"), 1.0, 1.0, 12.0])[0] == \
        "exploding_gradients"
    with pytest.raises(trainscope.Error, match="phase"):
        c(phase="Forward")
    with pytest.raises(trainscope.Error, match="wording"):
        c(phase="loss", wording="cli")


def test_nonfinite_off_writes_null_loss(run_dir):
    net = Net(inject=2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    mon = trainscope.watch(net, opt, run_dir=run_dir, nonfinite=False)
    train(net, mon, opt, 2)
    mon.close()
    steps = [r for r in records(run_dir) if r["type"] == "step"]
    assert steps[1]["loss"] is None and steps[1]["grad_norm"] is None


def test_bad_input(run_dir, tmp_path):
    with pytest.raises(trainscope.Error, match="no trainable parameters"):
        trainscope.watch(torch.nn.ReLU(), run_dir=run_dir)
    with pytest.raises(trainscope.Error, match="not a torch.nn.Module"):
        trainscope.watch(object(), run_dir=run_dir)
    net = Net()
    mon = trainscope.watch(net, run_dir=run_dir)
    with pytest.raises(trainscope.Error, match="outside"):
        mon.log(loss=1.0)
    mon.close()
    mon.close()  # idempotent
    for call in (lambda: mon.step(), lambda: mon.phase("forward"), lambda: mon.log(loss=1)):
        with pytest.raises(trainscope.Error, match="closed Monitor"):
            with call():
                pass
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(trainscope.Error, match="cannot write the metrics file"):
        trainscope.watch(net, run_dir=str(blocker))


def test_optimizer_is_restored_and_scheduler_works(run_dir):
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    wrapped = opt.__dict__.get("step")
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    for step in range(1, 5):
        with mon.step():
            torch.nn.functional.mse_loss(net(torch.randn(2, 16)), torch.zeros(2, 4)).backward()
            opt.step()
            opt.zero_grad()
        sched.step()
    mon.close()
    lrs = [r["lr"] for r in records(run_dir) if r["type"] == "step"]
    assert lrs == [0.1, 0.1, 0.05, 0.05]
    assert opt.__dict__.get("step") is wrapped  # close() put the scheduler's wrapper back
