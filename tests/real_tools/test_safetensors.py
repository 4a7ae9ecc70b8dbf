"""safetensors files written by the `safetensors` library itself, read by our verbs.

`trainscope ckpt inspect FILE --json` must list every tensor with the name, shape and dtype
that the library's own `safe_open` reports, bytes = elements x element size, and values
(non-finite count, L2 norm, min/max over finite values) equal to numpy's within float
tolerance; `ckpt verify` must pass a finite file and name the tensor with a planted NaN/Inf;
`trainscope data stats FILE --json` must give per-tensor count, mean, std (population), min,
max and NaN/Inf counts equal to numpy's, exit 0 on a finite file and 1 on the NaN/Inf one.

Run: TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest -q tests/real_tools/test_safetensors.py
"""

import json
import math
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402
import safetensors.numpy  # noqa: E402
import safetensors.torch  # noqa: E402

from _cli import BINARY, run, run_json  # noqa: E402

# Element size in bytes of each safetensors dtype written here.
ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I8": 1, "U8": 1,
              "BOOL": 1}
# Our `data stats` names dtypes numpy-style.
NUMPY_NAME = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
              "I64": "int64", "I32": "int32", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def torch_tensors():
    g = torch.Generator().manual_seed(28)
    return {
        "layers.0.weight_bf16": (torch.randn(17, 9, generator=g) * 3).to(torch.bfloat16),
        "layers.0.bias_fp16": (torch.randn(33, generator=g) * 100).to(torch.float16),
        "layers.1.weight_fp32": torch.randn(4, 5, 6, generator=g),
        "step_int64": torch.tensor([-(2**40), 0, 7, 2**40 + 3], dtype=torch.int64),
        "ids_int32": torch.randint(-70000, 70000, (50,), dtype=torch.int32, generator=g),
        "q_int8": torch.tensor([-128, -1, 0, 5, 127], dtype=torch.int8),
        "pix_uint8": torch.arange(0, 256, 3, dtype=torch.uint8).reshape(2, -1)[:, :40].clone(),
        "mask_bool": torch.tensor([[True, False, True], [False, False, True]]),
        "empty_fp32": torch.zeros(0, 8, dtype=torch.float32),
        "scalar_fp32": torch.tensor(-2.75, dtype=torch.float32),
    }


def numpy_arrays():
    rng = np.random.default_rng(5)
    return {
        "f16": (rng.standard_normal((8, 3)) * 1000).astype(np.float16),
        "f32": rng.standard_normal((7, 11)).astype(np.float32),
        "f64": rng.standard_normal(13),
        "i64": rng.integers(-(2**50), 2**50, size=9, dtype=np.int64),
        "i32": rng.integers(-(2**31), 2**31 - 1, size=(3, 4), dtype=np.int32),
        "i8": rng.integers(-128, 127, size=20, dtype=np.int8),
        "u8": rng.integers(0, 255, size=(2, 2, 5), dtype=np.uint8),
        "flags": rng.integers(0, 2, size=15).astype(np.bool_),
        "empty": np.zeros((3, 0), dtype=np.int32),
        "scalar": np.array(41, dtype=np.int64),
    }


def nonfinite_arrays():
    bad = np.linspace(-4.0, 6.0, 24, dtype=np.float32).reshape(4, 6)
    bad[1, 2] = np.nan
    bad[2, 5] = np.inf
    bad[3, 0] = -np.inf
    half = np.array([1.5, np.nan, -2.0, 0.25], dtype=np.float16)
    return {"bad": bad, "half_nan": half, "fine": np.arange(10, dtype=np.float32)}


@pytest.fixture(scope="module")
def files():
    d = tempfile.mkdtemp(prefix="ts-real-safetensors-")
    try:
        paths = {
            "torch": os.path.join(d, "torch_all.safetensors"),
            "numpy": os.path.join(d, "numpy_all.safetensors"),
            "nonfinite": os.path.join(d, "nonfinite.safetensors"),
        }
        safetensors.torch.save_file(torch_tensors(), paths["torch"], metadata={"format": "pt"})
        safetensors.numpy.save_file(numpy_arrays(), paths["numpy"])
        safetensors.numpy.save_file(nonfinite_arrays(), paths["nonfinite"])
        yield paths
    finally:
        shutil.rmtree(d, ignore_errors=True)


def library_view(path):
    """What the library says: name -> (shape, dtype, float64 values as numpy decodes them)."""
    out = {}
    with safe_open(path, framework="pt") as f:
        for name in f.keys():
            sl = f.get_slice(name)
            t = f.get_tensor(name)
            values = (t.float() if t.dtype == torch.bfloat16 else t).numpy().astype(np.float64)
            out[name] = (list(sl.get_shape()), sl.get_dtype(), values)
    return out


def finite_stats(values):
    v = values.ravel()
    fin = v[np.isfinite(v)]
    return {
        "count": v.size,
        "nan": int(np.isnan(v).sum()),
        "inf": int(np.isinf(v).sum()),
        "nonfinite": int((~np.isfinite(v)).sum()),
        "l2": float(np.sqrt(np.sum(fin * fin))) if fin.size else 0.0,
        "min": float(fin.min()) if fin.size else 0.0,
        "max": float(fin.max()) if fin.size else 0.0,
        "mean": float(fin.mean()) if fin.size else 0.0,
        "std": float(fin.std()) if fin.size > 1 else 0.0,
    }


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def check_inspect(path, expect_nonfinite):
    lib = library_view(path)
    rc, doc = run_json("ckpt", "inspect", path)
    (ck,) = doc["checkpoints"]
    assert ck["format"] == "safetensors"
    assert ck["tensor_count"] == len(lib)
    got = {t["name"]: t for t in ck["tensors"]}
    assert sorted(got) == sorted(lib)
    total = 0
    for name, (shape, dtype, values) in lib.items():
        t = got[name]
        assert t["shape"] == shape, name
        assert t["dtype"] == dtype, name
        assert t["bytes"] == values.size * ITEM_BYTES[dtype], name
        total += t["bytes"]
        want = finite_stats(values)
        assert t["nonfinite"] == want["nonfinite"], name
        for key in ("l2", "min", "max"):
            assert close(t[key], want[key]), (name, key, t[key], want[key])
    assert ck["tensor_bytes"] == total
    assert ck["ok"] == (not expect_nonfinite)
    assert rc == (1 if expect_nonfinite else 0)
    return ck


def check_data_stats(path, expect_nonfinite):
    lib = library_view(path)
    p = subprocess.run([BINARY, "data", "stats", path, "--json"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == (1 if expect_nonfinite else 0), p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["format"] == "trainscope.data.stats"
    assert doc["file_format"] == "safetensors"
    got = {a["name"]: a for a in doc["arrays"]}
    assert sorted(got) == sorted(lib)
    for name, (shape, dtype, values) in lib.items():
        a = got[name]
        assert a["shape"] == shape, name
        assert a["dtype"] == NUMPY_NAME[dtype], name
        assert a["float64"] == (dtype == "F64"), name
        if values.size == 0:
            assert a["features"] == [], name
            continue
        (f,) = a["features"]  # one set of statistics per tensor
        want = finite_stats(values)
        assert f["count"] == want["count"], name
        assert f["nan"] == want["nan"], name
        assert f["inf"] == want["inf"], name
        assert "normalize" not in f, name  # weights get no normalisation advice
        for key in ("mean", "std", "min", "max"):
            assert math.isclose(f[key], want[key], rel_tol=1e-9, abs_tol=1e-6), \
                (name, key, f[key], want[key])
    return doc


def test_torch_file_inspect_matches_safe_open(files):
    ck = check_inspect(files["torch"], expect_nonfinite=False)
    dtypes = {t["dtype"] for t in ck["tensors"]}
    assert dtypes == {"BF16", "F16", "F32", "I64", "I32", "I8", "U8", "BOOL"}
    by = {t["name"]: t for t in ck["tensors"]}
    assert by["empty_fp32"]["shape"] == [0, 8] and by["empty_fp32"]["bytes"] == 0
    assert by["scalar_fp32"]["shape"] == [] and by["scalar_fp32"]["bytes"] == 4
    assert by["scalar_fp32"]["min"] == by["scalar_fp32"]["max"] == -2.75
    assert by["step_int64"]["max"] == 2**40 + 3  # 64-bit integers decoded exactly


def test_numpy_file_inspect_matches_safe_open(files):
    ck = check_inspect(files["numpy"], expect_nonfinite=False)
    by = {t["name"]: t for t in ck["tensors"]}
    assert by["scalar"]["shape"] == [] and by["scalar"]["min"] == 41
    assert by["empty"]["shape"] == [3, 0] and by["empty"]["bytes"] == 0


def test_nonfinite_file_inspect_counts_planted_values(files):
    ck = check_inspect(files["nonfinite"], expect_nonfinite=True)
    by = {t["name"]: t for t in ck["tensors"]}
    assert by["bad"]["nonfinite"] == 3
    assert by["half_nan"]["nonfinite"] == 1
    assert by["fine"]["nonfinite"] == 0
    named = [p["problem"] for p in ck["problems"]]
    assert any('"bad"' in p and "non-finite" in p for p in named), named
    assert any('"half_nan"' in p for p in named), named
    assert not any('"fine"' in p for p in named), named


def test_verify_passes_finite_files_and_fails_nonfinite(files):
    for key in ("torch", "numpy"):
        p = run("ckpt", "verify", files[key])
        assert p.returncode == 0, p.stdout + p.stderr
    p = run("ckpt", "verify", files["nonfinite"])
    assert p.returncode == 1
    assert "bad" in p.stdout and "non-finite" in p.stdout, p.stdout


def test_data_stats_torch_file_matches_numpy(files):
    check_data_stats(files["torch"], expect_nonfinite=False)


def test_data_stats_numpy_file_matches_numpy(files):
    doc = check_data_stats(files["numpy"], expect_nonfinite=False)
    assert any("float64" in f for f in doc["findings"]), doc["findings"]


def test_data_stats_nonfinite_file_exits_1(files):
    doc = check_data_stats(files["nonfinite"], expect_nonfinite=True)
    by = {a["name"]: a["features"][0] for a in doc["arrays"]}
    assert (by["bad"]["nan"], by["bad"]["inf"]) == (1, 2)
    assert (by["half_nan"]["nan"], by["half_nan"]["inf"]) == (1, 0)
    assert (by["fine"]["nan"], by["fine"]["inf"]) == (0, 0)


def test_diff_of_library_files(files):
    d = tempfile.mkdtemp(prefix="ts-real-safetensors-diff-")
    try:
        a = os.path.join(d, "a.safetensors")
        b = os.path.join(d, "b.safetensors")
        c = os.path.join(d, "c.safetensors")
        tensors = torch_tensors()
        safetensors.torch.save_file(tensors, a)
        safetensors.torch.save_file(tensors, c)
        tensors["layers.1.weight_fp32"] = tensors["layers.1.weight_fp32"].clone()
        tensors["layers.1.weight_fp32"][2, 3, 4] += 0.5
        safetensors.torch.save_file(tensors, b)
        rc, doc = run_json("ckpt", "diff", a, c)
        assert rc == 0 and doc["same"] and doc["first_different"] is None
        rc, doc = run_json("ckpt", "diff", a, b)
        assert rc == 1 and not doc["same"]
        assert doc["first_different"] == "layers.1.weight_fp32"
        by = {t["name"]: t for t in doc["tensors"]}
        assert [n for n, t in by.items() if t["differs"]] == ["layers.1.weight_fp32"]
        assert math.isclose(by["layers.1.weight_fp32"]["max_abs"], 0.5, rel_tol=1e-6)
    finally:
        shutil.rmtree(d, ignore_errors=True)
