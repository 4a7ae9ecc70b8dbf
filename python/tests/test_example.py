"""examples/train_with_trainscope.py runs, on one and on two ranks, and its outputs are read
by the CLI: diagnose (metrics), ckpt verify (checkpoints), hang analyze (no hang)."""
import json
import os
import subprocess
import sys

from conftest import REPO, launch, trainscope_binary

EXAMPLE = os.path.join(REPO, "examples", "train_with_trainscope.py")


def cli(*args):
    p = subprocess.run([trainscope_binary()] + list(args), capture_output=True, text=True)
    assert p.returncode in (0, 1), (args, p.stdout, p.stderr)
    return json.loads(p.stdout)


def test_single_process_then_resume(run_dir):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    p = subprocess.run([sys.executable, EXAMPLE, "--run-dir", run_dir, "--steps", "10",
                        "--save-every", "5"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert "done: 10 steps" in p.stdout
    d = cli("diagnose", run_dir, "--json")
    assert d["runs"][0]["loss_points"] == 10
    assert cli("ckpt", "verify", os.path.join(run_dir, "checkpoints", "step-10"), "--json")["ok"]
    p = subprocess.run([sys.executable, EXAMPLE, "--run-dir", run_dir, "--steps", "12",
                        "--resume"], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert "resumed from" in p.stdout and p.stdout.strip().endswith("metrics.rank0.jsonl")
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["step-10", "step-12"]
    # the resumed run appended steps 11 and 12 to the same metrics file
    d = cli("diagnose", run_dir, "--json")
    assert (d["runs"][0]["first_step"], d["runs"][0]["last_step"]) == (1, 12)


def test_two_ranks(run_dir):
    results = launch(EXAMPLE, ["--run-dir", run_dir, "--steps", "6", "--save-every", "3"])
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, "rank %d: %s" % (rank, err)
    d = cli("diagnose", run_dir, "--json")
    assert sorted(r["rank"] for r in d["runs"]) == [0, 1]
    assert cli("ckpt", "verify", os.path.join(run_dir, "checkpoints", "step-6"), "--json")["ok"]
    assert cli("hang", "analyze", run_dir, "--json")["problem"] is False
