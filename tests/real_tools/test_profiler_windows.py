"""`trainscope trace analyze` on torch.profiler windows as a user's CPU loop writes them (issue 33
part 4): a plain PyTorch loop profiled with schedule(wait=1, warmup=1, active=2, repeat=4) and
tensorboard_trace_handler writes four files of one process. They must be one rank with four
windows (not ranks 0-3 with a "step times differ across ranks" finding), with no annotation
(ProfilerStep#N, record_function ranges) among the top operators and no CUDA advice on a CPU
trace. AdamW(foreach=False) profiled the same way runs div > add_ > addcdiv_ once per parameter
inside Optimizer.step: the advice is the optimizer's multi-tensor path, not a fused LayerNorm.

The traces are made here by the venv's torch (a few seconds on 2 cores). Run:
TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest -q tests/real_tools/test_profiler_windows.py
"""
import glob
import os
import subprocess
import sys

import pytest

from _cli import run, run_json

torch = pytest.importorskip("torch")

LOOP = r"""
import sys, torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.profiler import tensorboard_trace_handler
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
with profile(activities=[ProfilerActivity.CPU],
             schedule=schedule(wait=1, warmup=1, active=2, repeat=4),
             on_trace_ready=tensorboard_trace_handler(sys.argv[1])) as prof:
    for step in range(16):
        x = torch.randn(16, 32)
        with record_function("## forward ##"):
            loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
"""
CUDA_WORDS = ("CUDA", "cuda", "kernel launch", "CUDA graphs")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("profiler_windows"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-c", LOOP, out], capture_output=True, text=True,
                       timeout=180, env=env)
    assert p.returncode == 0, p.stderr
    files = sorted(glob.glob(os.path.join(out, "*.pt.trace.json")))
    assert len(files) == 4, files  # one file per window, all of this one process
    return out


def test_four_windows_of_one_process_are_one_rank(trace_dir):
    code, doc = run_json("trace", "analyze", trace_dir)
    assert code in (0, 1)
    assert len(doc["ranks"]) == 1, [(r["rank"], r["path"]) for r in doc["ranks"]]
    r = doc["ranks"][0]
    assert r["rank"] == 0 and r["device"] == "cpu"
    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(trace_dir, "*.json")))
    assert sorted(w["file"] for w in r["windows"]) == files
    # By time, each window its own steps (HTA leaves out each window's last ProfilerStep): the
    # rank's steps are all of them, and nothing is skipped.
    starts = [w["start_us"] for w in r["windows"]]
    assert starts == sorted(starts) and starts[0] == 0
    for w in r["windows"]:
        assert w["end_us"] > w["start_us"] and len(w["steps"]) == 1 and w["mean_step_us"] > 0
    assert r["steps"] == [s for w in r["windows"] for s in w["steps"]] == [2, 6, 10, 14]
    assert doc["skipped"] == []
    # No cross-rank finding between windows of one rank.
    assert not [f for f in doc["findings"] if f["rank"] == -1] and doc["stragglers"] == []


def test_annotations_are_not_operators(trace_dir):
    _, doc = run_json("trace", "analyze", trace_dir, "--include-last-step")
    r = doc["ranks"][0]
    assert len(r["steps"]) == 8
    names = [row["name"] for table in r["top_operators"].values() for row in table]
    assert names, r["top_operators"]
    for n in names:
        assert not n.startswith(("ProfilerStep#", "##", "Optimizer.")), n


def test_cpu_trace_gets_no_cuda_advice(trace_dir):
    _, doc = run_json("trace", "analyze", trace_dir)
    findings = doc["findings"] + [f for r in doc["ranks"] for f in r["findings"]]
    for f in findings:
        for word in CUDA_WORDS:
            assert word not in f["fix"], f
    p = run("trace", "analyze", trace_dir)
    assert "rank 0: 4 windows" in p.stdout, p.stdout
    assert "CUDA" not in p.stdout


def test_adamw_loop_gets_optimizer_advice_not_layernorm(trace_dir):
    _, doc = run_json("trace", "analyze", trace_dir)
    r = doc["ranks"][0]
    cands = r["fusion_candidates"]
    assert cands and all(c["pattern"] == "optimizer" and c["optimizer"] == "AdamW" for c in cands)
    # Adam's update: exp_avg.mul_().add_(), exp_avg_sq.mul_().addcmul_(), denom = sqrt/div,
    # param.addcdiv_(): each sequence is one of those per-parameter operators.
    adam_ops = ("aten::add_", "aten::mul_", "aten::addcmul_", "aten::addcdiv_", "aten::div",
                "aten::sqrt", "aten::div_", "aten::lerp_")
    for c in cands:
        assert all(op in adam_ops for op in c["sequence"].split(" > ")), c
    fusion = [f for f in r["findings"] if f["code"] == "fusion"]
    assert len(fusion) == 1, r["findings"]
    assert "foreach=True" in fusion[0]["fix"] and "LayerNorm" not in fusion[0]["fix"], fusion
    assert "AdamW.step" in fusion[0]["evidence"]
