"""torch.distributed.checkpoint folders written by torch 2.x itself, read by our verbs.

Saves: `dcp.save` in one process without a process group, and a 2-rank gloo job on the CPU
(two subprocesses, a FileStore rendezvous: no port to pick) saving FSDP2 `fully_shard`
parameters (`get_model_state_dict`: DTensors, one chunk per rank), a DTensor sharded by
hand and a key of each rank's own. What `trainscope ckpt inspect DIR --json` lists must be
what torch's own `FileSystemReader(DIR).read_metadata()` says (names, global shapes,
dtypes, chunks, the .distcp file of each entry); `ckpt verify` must pass the intact folder
and name a .distcp file cut in the middle and a missing one (exit 1); `ckpt diff` must say
two identical saves are the same and name the one tensor whose values differ.

Run: TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest -q tests/real_tools/test_dcp.py
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")
from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # noqa: E402

from _cli import BINARY, run, run_json  # noqa: E402

# The 2-rank job: each rank writes three saves; "b" differs from "a" in one element of the
# DTensor "dt" (held by rank 1), "c" is "a" again.
WORKER = textwrap.dedent("""
    import datetime, sys, torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor

    rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)  # the same initial weights on both ranks
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Linear(4, 3))
    fully_shard(model, mesh=mesh)
    sd = {"model": get_model_state_dict(model)}
    sd["dt"] = distribute_tensor(torch.arange(10.0).reshape(5, 2), mesh, [Shard(0)])
    sd[f"rank{rank}.own"] = torch.full((3,), float(rank + 1), dtype=torch.float64)
    sd["step"] = 11
    dcp.save(sd, checkpoint_id=out + "/two_a")
    dcp.save(sd, checkpoint_id=out + "/two_c")
    if rank == 1:
        with torch.no_grad():
            sd["dt"].to_local()[1, 0] += 100.0  # global element [4, 0]
    dcp.save(sd, checkpoint_id=out + "/two_b")
    dist.destroy_process_group()
""")


def single_state_dict():
    g = torch.Generator().manual_seed(3)
    return {
        "model": {
            "embed.weight": torch.randn(10, 4, generator=g),
            "norm.weight": torch.randn(4, generator=g).to(torch.bfloat16),
            "head.bias": torch.randn(3, generator=g).to(torch.float16),
        },
        "counts": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "mask": torch.tensor([True, False, True]),
        "q": torch.tensor([-3, 4], dtype=torch.int8),
        "scalar": torch.tensor(2.5),
        "step": 7,  # not a tensor: BytesStorageMetadata
    }


@pytest.fixture(scope="module")
def saves():
    d = tempfile.mkdtemp(prefix="ts-real-dcp-")
    try:
        # Two ranks in the background while this process saves the single-process folders.
        store = os.path.join(d, "store")
        script = os.path.join(d, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        ranks = [subprocess.Popen([sys.executable, script, str(r), store, d], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(2)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
            sd = single_state_dict()
            dcp.save(sd, checkpoint_id=os.path.join(d, "one_a"))
            dcp.save(sd, checkpoint_id=os.path.join(d, "one_c"))
            sd["model"]["embed.weight"] = sd["model"]["embed.weight"].clone()
            sd["model"]["embed.weight"][6, 2] -= 1.0
            dcp.save(sd, checkpoint_id=os.path.join(d, "one_b"))
            sd = single_state_dict()
            sd["step"] = 8
            dcp.save(sd, checkpoint_id=os.path.join(d, "one_step"))
        for r, p in enumerate(ranks):
            try:
                log, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                for q in ranks:
                    q.kill()
                raise
            assert p.returncode == 0, f"rank {r} failed:\n{log}"
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def torch_view(path):
    """name -> (global shape, dtype, chunks, files) as torch reads .metadata."""
    md = dcp.FileSystemReader(path).read_metadata()
    files = {}
    for index, info in md.storage_data.items():
        files.setdefault(index.fqn, set()).add(info.relative_path)
    out = {}
    for name, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            out[name] = (list(m.size), str(m.properties.dtype).removeprefix("torch."),
                         len(m.chunks), files[name])
        else:
            out[name] = ([], "bytes", 0, files[name])
    return out


ELEMENT_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8,
                 "int8": 1, "bool": 1}


def check_inspect_matches_torch(path):
    want = torch_view(path)
    rc, doc = run_json("ckpt", "inspect", path)
    assert rc == 0, doc
    (ck,) = doc["checkpoints"]
    assert ck["format"] == "dcp" and ck["ok"] and ck["complete"], ck["problems"]
    got = {t["name"]: t for t in ck["tensors"]}
    assert sorted(got) == sorted(want)
    for name, (shape, dtype, chunks, files) in want.items():
        t = got[name]
        assert (t["shape"], t["dtype"], t["chunks"]) == (shape, dtype, chunks), (name, t)
        assert t["file"] == (next(iter(files)) if len(files) == 1 else "(several)"), (name, t)
        if dtype != "bytes":
            assert t["bytes"] == math.prod(shape) * ELEMENT_BYTES[dtype], (name, t)
    return got


def test_single_process_inspect_matches_torch_metadata(saves):
    got = check_inspect_matches_torch(os.path.join(saves, "one_a"))
    # What the state dict was, independently of torch's reading.
    assert got["model.embed.weight"]["shape"] == [10, 4]
    assert got["model.norm.weight"]["dtype"] == "bfloat16"
    assert got["model.head.bias"]["dtype"] == "float16"
    assert got["scalar"]["shape"] == [] and got["scalar"]["dtype"] == "float32"
    assert got["step"]["dtype"] == "bytes" and got["step"]["chunks"] == 0
    assert all(t["chunks"] == 1 for t in got.values() if t["dtype"] != "bytes")


def test_two_rank_inspect_matches_torch_metadata(saves):
    got = check_inspect_matches_torch(os.path.join(saves, "two_a"))
    # FSDP2 shards dim 0 over the two ranks: one chunk per rank, in both rank files.
    for name, shape in (("model.0.weight", [4, 6]), ("model.0.bias", [4]),
                        ("model.1.weight", [3, 4]), ("model.1.bias", [3]), ("dt", [5, 2])):
        assert got[name]["shape"] == shape
        assert got[name]["chunks"] == 2 and got[name]["file"] == "(several)", got[name]
    assert got["rank0.own"]["file"] == "__0_0.distcp"
    assert got["rank1.own"]["file"] == "__1_0.distcp"
    assert got["rank1.own"]["dtype"] == "float64"


@pytest.mark.parametrize("save", ["one_a", "two_a"])
def test_verify_passes_intact_folder(saves, save):
    p = run("ckpt", "verify", os.path.join(saves, save))
    assert p.returncode == 0, p.stdout + p.stderr


def damaged_copy(saves, save, tmp):
    dst = os.path.join(tmp, save)
    shutil.copytree(os.path.join(saves, save), dst)
    return dst


@pytest.mark.parametrize("save,victim", [("one_a", "__0_0.distcp"), ("two_a", "__1_0.distcp"),
                                         ("two_a", "__0_0.distcp")])
def test_verify_names_truncated_distcp(saves, save, victim):
    with tempfile.TemporaryDirectory(prefix="ts-real-dcp-cut-") as tmp:
        dst = damaged_copy(saves, save, tmp)
        path = os.path.join(dst, victim)
        size = os.path.getsize(path)
        os.truncate(path, size // 2)  # cut in the middle of a chunk's torch.save archive
        p = run("ckpt", "verify", dst)
        assert p.returncode == 1, p.stdout + p.stderr
        lines = [l for l in p.stdout.splitlines() if victim in l]
        assert any("truncated" in l for l in lines), p.stdout
        rc, doc = run_json("ckpt", "verify", dst)
        assert rc == 1 and not doc["ok"]
        (ck,) = doc["checkpoints"]
        assert [os.path.basename(x["file"]) for x in ck["problems"]] == [victim]
        assert ck["problems"][0]["problem"].startswith(f"truncated: {size // 2} bytes")


@pytest.mark.parametrize("save,victim", [("one_a", "__0_0.distcp"), ("two_a", "__0_0.distcp")])
def test_verify_names_missing_distcp(saves, save, victim):
    with tempfile.TemporaryDirectory(prefix="ts-real-dcp-gone-") as tmp:
        dst = damaged_copy(saves, save, tmp)
        os.remove(os.path.join(dst, victim))
        rc, doc = run_json("ckpt", "verify", dst)
        assert rc == 1 and not doc["ok"]
        (ck,) = doc["checkpoints"]
        assert not ck["complete"]
        named = [x for x in ck["problems"] if os.path.basename(x["file"]) == victim]
        assert len(named) == 1 and named[0]["problem"].startswith("missing"), ck["problems"]
        # Besides: the folder has no .distcp left at all when the victim was the only one.
        others = [x for x in ck["problems"] if x not in named]
        assert others == ([] if save.startswith("two") else
                          [{"file": dst, "problem": "incomplete: no .distcp data files next to "
                                                    ".metadata"}]), ck["problems"]
        p = run("ckpt", "verify", dst)
        assert p.returncode == 1 and victim in p.stdout, p.stdout


def diff(saves, a, b):
    return run_json("ckpt", "diff", os.path.join(saves, a), os.path.join(saves, b))


@pytest.mark.parametrize("a,b", [("one_a", "one_c"), ("two_a", "two_c")])
def test_diff_of_identical_saves_is_same(saves, a, b):
    rc, doc = diff(saves, a, b)
    assert rc == 0 and doc["same"] and doc["first_different"] is None, doc
    assert doc["only_in_a"] == [] and doc["only_in_b"] == []
    # Values were compared, not only the metadata.
    assert [t["name"] for t in doc["tensors"] if t.get("change")] == []
    assert len(doc["tensors"]) == len(torch_view(os.path.join(saves, a)))


@pytest.mark.parametrize("a,b,name,max_abs", [("one_a", "one_b", "model.embed.weight", 1.0),
                                              ("two_a", "two_b", "dt", 100.0)])
def test_diff_names_the_tensor_that_differs(saves, a, b, name, max_abs):
    rc, doc = diff(saves, a, b)
    assert rc == 1 and not doc["same"], doc
    assert doc["first_different"] == name
    by = {t["name"]: t for t in doc["tensors"]}
    assert [n for n, t in by.items() if t["differs"]] == [name]
    assert math.isclose(by[name]["max_abs"], max_abs, rel_tol=1e-6), by[name]
    assert [t["name"] for t in doc["tensors"] if t.get("change")] == []


def test_diff_names_a_changed_non_tensor_entry(saves):
    rc, doc = diff(saves, "one_a", "one_step")
    assert rc == 1 and doc["first_different"] == "step", doc
    assert [t["name"] for t in doc["tensors"] if t["differs"]] == ["step"]
