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


# ---- issue 33: a corrupt newest checkpoint is named by load and verify.
# A plain PyTorch loop saves three checkpoints with keep=3; then the newest one is damaged
# as disks and killed jobs damage them: bytes flipped inside one tensor's data, a damaged
# safetensors header, or an unfinished save (the temporary folder a killed save leaves).

def train_and_save(run):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (1, 2, 3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        checkpoint.save(run, {"model": model.state_dict(), "optimizer": opt.state_dict()},
                        step=step, keep=3)
    return model


def tensor_range(st, name):
    """Absolute [begin, end) of tensor `name`'s data in safetensors file st."""
    import json
    with open(st, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        begin, end = json.loads(f.read(n))[name]["data_offsets"]
    return 8 + n + begin, 8 + n + end


def damage(run, how):
    newest = os.path.join(str(run), "checkpoints", "step-3")
    st = os.path.join(newest, "model.safetensors")
    if how == "tensor":
        begin, _ = tensor_range(st, "model.2.weight")
        with open(st, "r+b") as f:
            f.seek(begin + 4)
            b = f.read(4)
            f.seek(begin + 4)
            f.write(bytes(x ^ 0x5A for x in b))
        return newest
    if how == "header":
        with open(st, "r+b") as f:
            f.seek(12)
            f.write(b"\x00\x01")
        return newest
    # A save of step 4 killed before its manifest: what WriteCheckpoint leaves behind (pid
    # 999999: not running, as a killed writer's is not).
    import shutil
    tmp = os.path.join(str(run), "checkpoints", "step-4.tmp-999999")
    os.makedirs(tmp)
    shutil.copyfile(st, os.path.join(tmp, "model.safetensors"))
    return tmp


def ckpt_verify_json(folder):
    import json
    import subprocess
    p = subprocess.run([os.environ.get("TS_BINARY", "trainscope"), "ckpt", "verify", str(folder),
                        "--json"], capture_output=True, text=True, timeout=120)
    t = subprocess.run([os.environ.get("TS_BINARY", "trainscope"), "ckpt", "verify",
                        str(folder)], capture_output=True, text=True, timeout=120)
    return p.returncode, json.loads(p.stdout), t.stdout


@pytest.mark.parametrize("how", ["tensor", "header", "unfinished"])
def test_damaged_newest_checkpoint_is_named(tmp_path, how):
    model = train_and_save(tmp_path)
    bad = damage(tmp_path, how)
    # The newest intact one: step 2 when step 3 is damaged, step 3 when step 4's save died.
    good_step = 3 if how == "unfinished" else 2
    step2 = os.path.join(str(tmp_path), "checkpoints", "step-%d" % good_step)

    with pytest.warns(UserWarning) as caught:
        ck = checkpoint.load(tmp_path, restore_rng=False)
    assert ck.step == good_step and ck.path == step2
    assert [s.path for s in ck.skipped] == [bad]
    reason = ck.skipped[0].reason
    said = [str(w.message) for w in caught if bad in str(w.message)]
    assert len(said) == 1 and reason in said[0] and step2 in said[0], said
    if how == "tensor":
        assert ck.skipped[0].tensor == "model.2.weight"
        assert reason.startswith("model.safetensors: corrupt: tensor \"model.2.weight\""), reason
    elif how == "header":
        assert ck.skipped[0].tensor is None
        assert "corrupt: damaged safetensors header" in reason and "incomplete" not in reason
    else:
        assert "incomplete" in reason and "corrupt" not in reason, reason
    with pytest.raises(trainscope.Error) as e:
        checkpoint.load(tmp_path, strict=True)
    assert bad in str(e.value) and reason in str(e.value) and step2 in str(e.value)
    # What was loaded is step 2's state, not the damaged one's.
    assert checkpoint.load(step2, restore_rng=False).state["model"]["2.weight"].shape == \
        model.state_dict()["2.weight"].shape

    rc, out, text = ckpt_verify_json(tmp_path / "checkpoints")
    by_path = {c["path"]: c for c in out["checkpoints"]}
    assert out["newest_good"] == {"path": step2, "step": good_step}
    assert "newest good checkpoint: %s (step %d)" % (step2, good_step) in text
    assert [by_path[p]["status"] for p in sorted(by_path) if p != bad] == \
        ["ok"] * (len(by_path) - 1)
    c = by_path[bad]
    if how == "unfinished":
        # An unfinished save in a folder of checkpoints: listed as incomplete, not a problem.
        assert rc == 0 and c["status"] == "incomplete" and not c["complete"] and c["ok"]
        return
    assert rc == 1 and c["status"] == "corrupt" and c["complete"] and not out["ok"]
    problems = c["problems"]
    assert problems and all(p["problem"].startswith("corrupt: ") for p in problems), problems
    if how == "tensor":
        assert [p.get("tensor") for p in problems] == ["model.2.weight"]
        assert "model.2.weight" in text
    else:
        assert "damaged safetensors header" in problems[0]["problem"]
        assert ", corrupt, problems found" in text and "incomplete" not in text


def test_old_manifest_without_tensor_hashes_still_verifies(tmp_path):
    """Manifests written before per-tensor hashes: checked by the file's hash as before."""
    import json
    train_and_save(tmp_path)
    newest = os.path.join(str(tmp_path), "checkpoints", "step-3")
    mpath = os.path.join(newest, "manifest.json")
    with open(mpath) as f:
        manifest = json.load(f)
    assert all("tensors" in e for e in manifest["files"] if e["path"].endswith(".safetensors"))
    for e in manifest["files"]:
        e.pop("tensors", None)
        e.pop("header", None)
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    assert checkpoint.verify(newest)["ok"] is True
    assert checkpoint.latest(tmp_path) == newest
    damage(tmp_path, "tensor")
    rc, out, _ = ckpt_verify_json(newest)
    problem = out["checkpoints"][0]["problems"][0]["problem"]
    assert rc == 1 and problem.startswith("hash mismatch: xxh3 ") and \
        "no per-tensor hashes" in problem
