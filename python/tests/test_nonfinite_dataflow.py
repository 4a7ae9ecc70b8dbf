"""The NaN tracer by data flow (issue 33 part 1), as a user's own loop meets it: a NaN feature
in one sample is bad data named by sample and feature, a module making NaN from finite input
is an operator in the forward, and the sentence never contradicts itself."""
import json
import os
import traceback

import pytest
import torch

import trainscope


def nonfinite_record(run_dir):
    with open(os.path.join(run_dir, "train", "metrics.rank0.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    nf = [r for r in recs if r["type"] == "nonfinite"]
    assert len(nf) == 1, recs
    return nf[0], recs


def user_loop(net, run_dir, batches, sample_ids=None):
    """A plain PyTorch loop with trainscope.watch; returns the NonFiniteError raised and the
    line of this file the traceback's innermost user frame points at."""
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    with pytest.raises(trainscope.NonFiniteError) as e:
        for step, (x, y) in enumerate(batches, start=1):
            ids = sample_ids(step) if sample_ids else None
            with mon.step(tokens=len(x), sample_ids=ids):
                out = net(x)  # FORWARD-LINE
                loss = torch.nn.functional.mse_loss(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()  # OPTIMIZER-LINE
    frames = [f for f in traceback.extract_tb(e.value.__traceback__) if f.filename == __file__]
    return e.value, frames[-1].line


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def batches(bad_step=0, bad_sample=5, bad_feature=3):
    g = torch.Generator().manual_seed(1)
    out = []
    for step in range(1, 5):
        x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
        if step == bad_step:
            x[bad_sample, bad_feature] = float("nan")
        out.append((x, y))
    return out


def assert_consistent(message, rec):
    # "not replayed" with "reproducibly", or "reproducible" with "not reproducible", is a
    # contradiction; and the fix may promise no anomaly checkpoint (watch writes none).
    if "not replayed" in message or "not reproducible" in message:
        assert "reproducibly" not in message, message
    if rec["reproducible"] is None:
        assert "reproducib" not in message.replace("not reproducible", "?"), message
    assert "anomaly checkpoint" not in message, message


def test_nan_feature_is_bad_data_naming_sample_and_feature(run_dir):
    err, line = user_loop(mlp(), run_dir, batches(bad_step=3, bad_sample=5, bad_feature=3))
    rec, recs = nonfinite_record(run_dir)
    assert (err.step, err.phase) == (3, "forward"), str(err)
    assert rec["class"] == "bad_data", rec
    assert rec["module"] == "0", rec  # the first module to output it
    assert rec["samples"] == [5], rec  # no sample ids given: the index in the batch
    assert rec["bad_inputs"] == [{"input": "args[0]", "sample": 5, "sample_id": None,
                                  "features": [3], "value": "nan"}], rec
    assert rec["reproducible"] is True and rec["replayed"] is True, rec
    msg = str(err)
    assert "sample 5, feature 3 of input args[0] is NaN" in msg, msg
    assert "class bad_data" in msg and "replayed twice, reproducible" in msg, msg
    assert "samples" in rec["fix"], rec
    assert_consistent(msg, rec)
    # Raised from the forward the user wrote, not from opt.step().
    assert "FORWARD-LINE" in line, line
    # The steps before the bad one are recorded; the bad one ends the file.
    assert [r["step"] for r in recs if r["type"] == "step"][:2] == [1, 2]
    assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "error"


def test_nan_feature_names_the_sample_id_given(run_dir):
    ids = lambda step: list(range(100 * step, 100 * step + 16))  # noqa: E731
    err, _ = user_loop(mlp(), run_dir, batches(bad_step=2, bad_sample=9, bad_feature=0),
                       sample_ids=ids)
    rec, _ = nonfinite_record(run_dir)
    assert rec["class"] == "bad_data" and rec["samples"] == [209], rec
    assert rec["bad_inputs"][0]["sample_id"] == 209 and rec["bad_inputs"][0]["sample"] == 9
    assert "sample 9 (id 209), feature 0" in str(err), str(err)


class LogOfNegative(torch.nn.Module):
    """Finite input, NaN output from step `at` on: log of a negative number."""

    def __init__(self, at):
        super().__init__()
        self.at, self.calls = at, 0
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        self.calls += 1 if torch.is_grad_enabled() else 0  # the tracer replays under no_grad
        h = self.lin(x)
        return torch.log(-h.abs() - 1) if self.calls >= self.at else h


def test_log_of_negative_is_an_operator_in_the_forward(run_dir):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), LogOfNegative(at=2),
                              torch.nn.Linear(16, 1))
    err, line = user_loop(net, run_dir, batches())
    rec, _ = nonfinite_record(run_dir)
    assert (err.step, err.phase, err.module) == (2, "forward", "2.lin") or \
        (err.step, err.phase, err.module) == (2, "forward", "2"), str(err)
    assert rec["class"] == "operator" and "bad_inputs" not in rec, rec
    msg = str(err)
    assert "turned non-finite from finite input" in msg and "class operator" in msg, msg
    assert "replayed twice, reproducible" in msg and "reproducibly" in rec["fix"], msg
    assert_consistent(msg, rec)
    assert "FORWARD-LINE" in line, line


class DivideByZero(torch.nn.Linear):
    """A planted division by zero in one layer's forward, from step `at` on."""

    def __init__(self, at):
        super().__init__(16, 16)
        self.at, self.calls = at, 0

    def forward(self, x):
        self.calls += 1 if torch.is_grad_enabled() else 0
        y = super().forward(x)
        return y / torch.zeros_like(y) if self.calls >= self.at else y


def test_division_by_zero_is_an_operator_naming_the_layer(run_dir):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), DivideByZero(at=3),
                              torch.nn.Linear(16, 1))
    err, _ = user_loop(net, run_dir, batches())
    rec, _ = nonfinite_record(run_dir)
    assert (err.step, err.phase, err.module) == (3, "forward", "2"), str(err)
    assert rec["class"] == "operator", rec
    assert_consistent(str(err), rec)


def test_backward_only_nan_does_not_claim_reproducibility(run_dir):
    # A gradient made Inf in the backward: the forward is replayed (finite), the backward is
    # not, so nothing may call it reproducible; raised from opt.step() (the gradient check).
    net = mlp()
    net[2].weight.register_hook(lambda g: g * float("inf"))
    err, line = user_loop(net, run_dir, batches())
    rec, _ = nonfinite_record(run_dir)
    assert (err.step, err.phase, err.parameter) == (1, "backward", "2.weight"), str(err)
    assert rec["class"] == "operator" and rec["reproducible"] is None, rec
    msg = str(err)
    assert "forward replayed and finite, backward not replayed" in msg, msg
    assert_consistent(msg, rec)
    assert "OPTIMIZER-LINE" in line, line


def test_tracer_time_is_recorded(run_dir):
    net = mlp()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with trainscope.watch(net, opt, run_dir=run_dir) as mon:
        for x, y in batches():
            with mon.step(tokens=16):
                loss = torch.nn.functional.mse_loss(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    with open(os.path.join(run_dir, "train", "metrics.rank0.jsonl")) as f:
        checks = [r for r in map(json.loads, f) if r["type"] == "nonfinite_checks"][0]
    assert 0 < checks["tracer_ms"] < checks["loop_ms"], checks
    assert 0 < checks["tracer_fraction"] < 1, checks


class TinyLM(torch.nn.Module):
    """An embedding whose output rows for token 7 are made NaN (a planted fault: weights
    finite, so the rule says bad data) and a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wte = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16)
        self.wte.register_forward_hook(
            lambda m, i, o: torch.where((i[0] == 7).unsqueeze(-1), float("nan"), o))

    def forward(self, ids):
        return self.head(self.wte(ids))


def test_embedding_output_names_sample_position_and_index(run_dir):
    net = TinyLM()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    ids = torch.randint(0, 7, (4, 6), generator=torch.Generator().manual_seed(0))
    ids[2, 4] = 7
    with pytest.raises(trainscope.NonFiniteError) as e:
        with mon.step(tokens=24, sample_ids=[10, 11, 12, 13]):
            logits = net(ids)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 16), ids.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    rec, _ = nonfinite_record(run_dir)
    assert (rec["phase"], rec["module"], rec["class"]) == ("forward", "wte", "bad_data"), rec
    assert rec["embedding_positions"] == [{"sample": 2, "position": 4, "index": 7}], rec
    assert rec["samples"] == [12], rec
    assert "at sample 2, position 4, index 7" in str(e.value), str(e.value)
    assert_consistent(str(e.value), rec)


def test_minus_inf_output_by_design_is_not_an_error(run_dir):
    # Log-probabilities with -inf for a masked class: the output is not finite, the loss and
    # the gradients are; training goes on (the forward check raises on NaN only).
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.log_softmax(self.lin(x).masked_fill(
                torch.tensor([False, False, False, True]), float("-inf")), -1)

    torch.manual_seed(0)
    net = Masked()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with trainscope.watch(net, opt, run_dir=run_dir) as mon:
        for x, _ in batches():
            with mon.step(tokens=16):
                loss = torch.nn.functional.nll_loss(net(x), torch.zeros(16, dtype=torch.long))
                opt.zero_grad()
                loss.backward()
                opt.step()
                mon.log(loss=loss)
    with open(os.path.join(run_dir, "train", "metrics.rank0.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    assert not [r for r in recs if r["type"] == "nonfinite"], recs
    assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "done", recs[-1]
