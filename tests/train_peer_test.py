#!/usr/bin/python3
"""The C++ trainer against its PyTorch peer (bench/train/peer.py), tensor by tensor: the same
tiny config trained for a few steps by `trainscope train` and by the peer under /usr/bin/python3
(PyTorch), both fp32 on the CPU from the same initial weights (same seed, same draw order).
Checked: the loss of every step (relative tolerance) and every parameter after the last step,
element by element: max |trainer - peer| <= atol + rtol * max |peer| per tensor, the trainer's
tensors read from its step-N checkpoint (model.safetensors). Exits non-zero with the
reason, naming the step or the tensor."""
import argparse, json, os, struct, subprocess, sys, tempfile

import torch


def read_safetensors(path):
    """name -> fp32 tensor of a safetensors file (F32 entries only; the trainer writes those)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {e['dtype']}, expected F32")
        lo, hi = e["data_offsets"]
        buf = bytearray(data[8 + n + lo:8 + n + hi])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(e["shape"]).clone()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--peer", required=True, help="bench/train/peer.py")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-6)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_peer_")
    cfg = json.load(open(a.config))
    base = os.path.dirname(os.path.abspath(a.config))
    cfg["data"]["corpus"] = [p if os.path.isabs(p) else os.path.join(base, p)
                             for p in cfg["data"]["corpus"]]
    cfg["train"]["steps"] = a.steps
    cfg["train"]["precision"] = "fp32"
    cfg["train"]["device"] = "cpu"
    cfg["model"]["tied_head"] = True  # the peer draws an untied head at another point
    cfg["checkpoint"] = {"every_steps": a.steps, "keep": 0, "async": False}
    config = os.path.join(tmp, "config.json")
    json.dump(cfg, open(config, "w"))
    run_dir = os.path.join(tmp, "run")
    p = subprocess.run([a.binary, "train", "--config", config, "--run-dir", run_dir],
                       capture_output=True, text=True, timeout=100)
    if p.returncode != 0:
        print("trainscope train failed:", p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        return 1
    weights_out = os.path.join(tmp, "peer_weights.pt")
    q = subprocess.run([sys.executable, a.peer, "--config", os.path.join(run_dir, "train", "config.json"),
                        "--weights-out", weights_out], capture_output=True, text=True, timeout=100)
    if q.returncode != 0:
        print("peer failed:", q.returncode, q.stdout[-2000:], q.stderr[-2000:])
        return 1
    peer = json.loads(q.stdout)

    failures = []
    metrics = os.path.join(run_dir, "train", "metrics.rank0.jsonl")
    ours = [r["loss"] for r in map(json.loads, open(metrics)) if r.get("type") == "step"]
    if len(ours) != a.steps or len(peer["losses"]) != a.steps:
        failures.append(f"steps: trainer {len(ours)}, peer {len(peer['losses'])}, wanted {a.steps}")
    worst_loss = 0.0
    for step, (x, y) in enumerate(zip(ours, peer["losses"]), start=1):
        d = abs(x - y) / max(abs(y), 1e-12)
        worst_loss = max(worst_loss, d)
        if not d <= a.loss_rtol:
            failures.append(f"step {step}: loss {x!r} (trainer) vs {y!r} (peer)")
    mine = read_safetensors(os.path.join(run_dir, "checkpoints", f"step-{a.steps}", "model.safetensors"))
    theirs = torch.load(weights_out)
    if sorted(mine) != sorted(theirs):
        failures.append(f"parameter names differ: {sorted(set(mine) ^ set(theirs))}")
    worst = (0.0, "")
    for name in sorted(set(mine) & set(theirs)):
        x, y = mine[name], theirs[name]
        if x.shape != y.shape:
            failures.append(f"{name}: shape {list(x.shape)} (trainer) vs {list(y.shape)} (peer)")
            continue
        diff = (x - y).abs().max().item()
        bound = a.atol + a.rtol * y.abs().max().item()
        worst = max(worst, (diff / bound, name))
        if not diff <= bound:
            failures.append(f"{name}: max |trainer - peer| = {diff:.3g} > {bound:.3g}")
    if not (peer["losses"] and peer["losses"][-1] < peer["losses"][0]):
        failures.append(f"the peer's loss did not fall: {peer['losses']}")
    if failures:
        print(f"FAILED: trainer vs PyTorch {peer.get('torch')} peer after {a.steps} steps")
        for f in failures:
            print("  -", f)
        print("(files kept in", tmp + ")")
        return 1
    print(f"ok: {a.steps} steps, {len(mine)} tensors against PyTorch {peer['torch']}: worst loss "
          f"difference {worst_loss:.2e} (rtol {a.loss_rtol}); worst tensor {worst[1]} at "
          f"{worst[0]:.2f} of its bound (atol {a.atol} + rtol {a.rtol} x max|w|)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
