"""`trainscope diagnose` on real PyTorch runs watched by trainscope.watch (issue 31, curves).

A tiny byte-level model (embedding -> MLP over the previous 16 bytes -> next byte, as
tests/data/diagnose/make_runs.py) is trained with Adam on the Debian license texts
(/usr/share/common-licenses), CPU, one thread, 300 steps of 128 samples (about 1 s a run).
Each run changes one thing from the healthy recipe (peak LR 3e-3 after a 10-step warm-up):

  early_decay  the LR decays linearly to 0 at step 150 of 300 (a schedule sized for half the
               run) while the loss is still falling            -> plateau at the LR's fall
  cosine10     a cosine decay over the whole run to 10% of the peak -> healthy
  constant     the peak LR throughout                          -> healthy
  two_bad      constant LR, the batches of steps 120 and 121 are random bytes (two
               consecutive bad batches)                        -> loss_spikes [120, 121]
"""
import glob
import json
import math
import os
import subprocess

import pytest
import torch

import trainscope
from conftest import trainscope_binary

CTX, STEPS, BATCH, PEAK, WARMUP = 16, 300, 128, 3e-3, 10
LICENSES = "/usr/share/common-licenses"


def corpus():
    text = b""
    for f in sorted(glob.glob(LICENSES + "/*")):
        if os.path.isfile(f):
            with open(f, "rb") as fh:
                text += fh.read()
    return torch.tensor(list(text), dtype=torch.long)


class Model(torch.nn.Module):
    def __init__(self, emb=24, hidden=128):
        super().__init__()
        self.emb = torch.nn.Embedding(256, emb)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(CTX * emb, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, 256))

    def forward(self, x):
        return self.mlp(self.emb(x).flatten(1))  # (B, 256)


def early_decay(step):  # warm-up, then linear to 0 at step 150
    return PEAK * step / WARMUP if step <= WARMUP else PEAK * max(0.0, (150 - step) / 140)


def cosine10(step):  # warm-up, then cosine to 10% of the peak at the last step
    if step <= WARMUP:
        return PEAK * step / WARMUP
    p = (step - WARMUP) / (STEPS - WARMUP)
    return PEAK * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def constant(step):
    return PEAK


def train(run_dir, lr_at, bad=(), seed=1):
    """One run watched by trainscope.watch (lr read from the optimizer); returns run_dir."""
    torch.set_num_threads(1)
    data = corpus()
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=lr_at(1))
    with trainscope.watch(model, opt, run_dir=str(run_dir), layer_norms_every=0) as mon:
        for step in range(1, STEPS + 1):
            for pg in opt.param_groups:
                pg["lr"] = lr_at(step)
            with mon.step(tokens=BATCH):
                ix = torch.randint(0, len(data) - CTX - 1, (BATCH,), generator=g)
                x = torch.stack([data[i:i + CTX] for i in ix])  # (B, CTX)
                y = data[ix + CTX]
                if step in bad:  # a corrupt batch: random bytes in, random bytes out
                    x = torch.randint(0, 256, x.shape, generator=g)
                    y = torch.randint(0, 256, y.shape, generator=g)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                mon.log(loss=loss.item())
    return str(run_dir)


def diagnose(run_dir):
    p = subprocess.run([trainscope_binary(), "diagnose", run_dir, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert len(out["runs"]) == 1
    return out["runs"][0]["curve"], out["findings"]


pytestmark = pytest.mark.skipif(not os.path.isdir(LICENSES), reason="no " + LICENSES)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_schedule_that_ends_early_is_a_plateau_at_the_lr_fall(tmp_path, seed):
    curve, findings = diagnose(train(tmp_path / "run", early_decay, seed=seed))
    assert curve["class"] == "plateau", curve
    ev = curve["evidence"]
    # The LR first stays under 5% of its 3e-3 peak at step 144 (3e-3 x 6/140 = 1.3e-4).
    assert curve["first_bad_step"] == 144 and ev["lr_fall_step"] == 144
    assert ev["lr_peak"] == pytest.approx(PEAK) and ev["lr_peak_step"] == WARMUP
    assert ev["lr_final"] == 0 and ev["lr_final_share"] == 0
    assert ev["loss_slope_before"] < -3 * ev["loss_slope_before_se"]
    assert ev["slope_after_share"] < 0.25
    (f,) = [f for f in findings if f["id"] == "curve.plateau"]
    assert "step 144, where the learning rate fell below 5% of its peak" in f["title"]
    assert "lr_fall_step 144" in f["evidence"]


@pytest.mark.parametrize("lr_at", [cosine10, constant])
def test_full_length_schedules_are_healthy(tmp_path, lr_at):
    curve, _ = diagnose(train(tmp_path / "run", lr_at))
    assert curve["class"] == "healthy", curve


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_consecutive_bad_batches_list_both_steps(tmp_path, seed):
    curve, findings = diagnose(train(tmp_path / "run", constant, bad=(120, 121), seed=seed))
    assert curve["class"] == "loss_spikes", curve
    assert curve["spike_steps"] == [120, 121] and curve["first_bad_step"] == 120
    (f,) = [f for f in findings if f["id"] == "curve.loss_spikes"]
    assert "at step(s) 120, 121" in f["title"]
    assert f["evidence"].endswith("spike_steps [120, 121]")
