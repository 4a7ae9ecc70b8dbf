"""trainscope.dump writes msprobe's layout, and msprobe's own compare reads it (issue 30
part 2; msprobe's own dump of the same model: test_dump_msprobe.py)."""
import csv
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "dump_job.py")
MSPROBE = os.path.join(os.path.dirname(sys.executable), "msprobe")


def need_msprobe():
    pytest.importorskip("msprobe")
    if not os.path.exists(MSPROBE):
        pytest.skip("no msprobe executable next to %s" % sys.executable)


def run_job(out, tool="ours", **kw):
    args = [sys.executable, JOB, "--tool", tool, "--out", str(out)]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-")] + ([] if v is True else [str(v)])
    p = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def rank_dir(root, step=0):
    dirs = glob.glob(os.path.join(str(root), "step%d" % step, "*"))
    dirs = [d for d in dirs if os.path.isdir(d)]
    assert len(dirs) == 1, dirs
    return dirs[0]


def load_dump(root, step=0):
    with open(os.path.join(rank_dir(root, step), "dump.json")) as f:
        return json.load(f)


def tensor_names(data):
    """Every tensor record's compare name (entry.input.0, entry.parameters.weight, ...)."""
    names = []

    def walk(v, path):
        if isinstance(v, dict) and v.get("type") == "torch.Tensor":
            names.append(path)
        elif isinstance(v, dict):
            for k, e in v.items():
                walk(e, "%s.%s" % (path, k))
        elif isinstance(v, list):
            for i, e in enumerate(v):
                walk(e, "%s.%d" % (path, i))

    for entry, body in data.items():
        for k, v in body.items():
            key = {"input_args": "input", "input_kwargs": "kwargs"}.get(k, k)
            if entry.split(".")[-2] == "parameters_grad":  # {param: [record]}
                walk(v[0], "%s.%s" % (entry, k))
            else:
                walk(v, "%s.%s" % (entry, key))
    return names


def msprobe_compare(a_step, b_step, out):
    os.makedirs(out, exist_ok=True)
    p = subprocess.run([MSPROBE, "compare", "-tp", a_step, "-gp", b_step, "-o", out],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    files = glob.glob(os.path.join(out, "compare_result_*.csv"))
    assert len(files) == 1, p.stdout[-2000:]
    with open(files[0]) as f:
        return list(csv.DictReader(f))


def test_layout_and_restores_torch(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    import trainscope
    before = (F.linear, torch.matmul, torch.Tensor.__add__, vars(torch.Tensor).get("sum"))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with trainscope.dump(model, tmp_path / "d", level="mix", mode="tensor"):
        model(torch.ones(2, 4)).sum().backward()
        assert F.linear is not before[0]
    assert (F.linear, torch.matmul, torch.Tensor.__add__, vars(torch.Tensor).get("sum")) == before
    root = rank_dir(tmp_path / "d")
    assert os.path.basename(root) == "proc%d" % os.getpid()
    dump = load_dump(tmp_path / "d")
    assert dump["task"] == "tensor" and dump["level"] == "mix" and dump["framework"] == "pytorch"
    data = dump["data"]
    assert list(data)[:2] == ["Functional.linear.0.forward", "Module.0.Linear.forward.0"]
    for name in ("Module.0.Linear.backward.0", "Module.0.Linear.parameters_grad.0",
                 "Functional.linear.0.backward", "Tensor.sum.0.forward"):
        assert name in data
    rec = data["Functional.linear.0.forward"]["output"][0]
    t = torch.load(os.path.join(dump["dump_data_dir"], rec["data_name"]))
    assert list(t.shape) == rec["shape"] == [2, 4]
    assert abs(float(t.max()) - rec["Max"]) < 1e-7 and abs(float(t.norm()) - rec["Norm"]) < 1e-6
    with open(os.path.join(root, "construct.json")) as f:
        assert json.load(f)["Functional.linear.0.forward"] == "Module.0.Linear.forward.0"
    with open(os.path.join(root, "stack.json")) as f:
        stacks = json.load(f)
    assert any("Functional.linear.0.forward" in v[0] for v in stacks.values())
    with pytest.raises(trainscope.Error):
        trainscope.dump(model, tmp_path / "e", level="L3")


def test_msprobe_compare_reads_our_dumps(tmp_path):
    need_msprobe()
    a = run_job(tmp_path / "a")
    b = run_job(tmp_path / "b")
    rows = msprobe_compare(os.path.join(str(a), "step0"), os.path.join(str(b), "step0"),
                           str(tmp_path / "out"))
    want = tensor_names(load_dump(a)["data"])
    assert len(want) > 40
    got = {r["NPU Name"]: r for r in rows}
    assert sorted(set(want) - set(got)) == []
    for name in want:
        r = got[name]
        assert r["Bench Name"] == name and r["Result"] == "pass", r
        if r["Cosine"] not in ("unsupported", "N/A"):
            assert float(r["Cosine"]) == pytest.approx(1.0) and float(r["MaxAbsErr"]) == 0.0, r
