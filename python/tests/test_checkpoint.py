"""trainscope.checkpoint: round trips of model + optimizer + RNG, keep-last-K, verify, errors."""
import os
import random

import numpy as np
import pytest
import torch

import trainscope
from trainscope import checkpoint


def make():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.9))
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def test_round_trip_restores_state_and_rng(tmp_path):
    model, opt = make()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
             "note": None, "history": (1.5, float("inf")),
             "bf16": torch.randn(2, 3).to(torch.bfloat16)}
    path = checkpoint.save(tmp_path, state, step=7)
    assert path == os.path.join(str(tmp_path), "checkpoints", "step-7")
    expected = (torch.rand(3), np.random.rand(2), random.random())
    ck = checkpoint.load(tmp_path)  # the run dir: its latest checkpoint; RNG restored
    assert (torch.rand(3).tolist(), np.random.rand(2).tolist(), random.random()) == \
        (expected[0].tolist(), expected[1].tolist(), expected[2])
    assert ck.step == 7 and ck.path == path
    assert ck.state["epoch"] == 3 and ck.state["note"] is None
    assert ck.state["history"] == (1.5, float("inf"))
    assert ck.state["bf16"].dtype == torch.bfloat16 and torch.equal(ck.state["bf16"],
                                                                     state["bf16"])
    for k, v in model.state_dict().items():
        assert ck.state["model"][k].dtype == v.dtype and torch.equal(ck.state["model"][k], v)
    model2, opt2 = make()
    with torch.no_grad():
        for p in model2.parameters():
            p.zero_()
    model2.load_state_dict(ck.state["model"])
    opt2.load_state_dict(ck.state["optimizer"])  # int keys and the betas tuple survive
    assert opt2.state_dict()["param_groups"][0]["betas"] == (0.8, 0.9)
    for a, b in zip(opt.state_dict()["state"].values(), opt2.state_dict()["state"].values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"])
    assert checkpoint.verify(tmp_path)["ok"] is True


def test_keep_last_k_and_latest(tmp_path):
    model, _ = make()
    for step in (1, 2, 3, 4):
        checkpoint.save(tmp_path, {"model": model.state_dict()}, step=step, keep=2)
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == ["step-3", "step-4"]
    assert checkpoint.latest(tmp_path).endswith("step-4")
    assert checkpoint.load(tmp_path / "checkpoints" / "step-3", restore_rng=False).step == 3


def test_corruption_and_bad_input(tmp_path):
    model, _ = make()
    path = checkpoint.save(tmp_path, {"model": model.state_dict()}, step=1)
    with pytest.raises(trainscope.Error, match="exist"):
        checkpoint.save(tmp_path, {"model": model.state_dict()}, step=1)
    with pytest.raises(trainscope.Error, match="cannot be saved"):
        checkpoint.save(tmp_path, {"f": object()}, step=2)
    with pytest.raises(trainscope.Error, match="no complete checkpoint"):
        checkpoint.load(tmp_path / "nothing")
    st = os.path.join(path, "model.safetensors")
    with open(st, "r+b") as f:
        f.seek(os.path.getsize(st) - 1)
        f.write(b"\x7f")
    assert checkpoint.verify(path)["ok"] is False
    with pytest.raises(trainscope.Error, match="model.safetensors"):
        checkpoint.load(path)
