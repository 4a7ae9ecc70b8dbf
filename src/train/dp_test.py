#!/usr/bin/python3
"""Data-parallel check: `trainscope launch -n 2 -- trainscope train --config CONFIG` must end
with bit-identical weights on both ranks (weights.rank<R>.json xxh3_64), valid metrics files
on both ranks, and every rank having run every step. Exits non-zero with the reason."""
import argparse, json, os, subprocess, sys, tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    a = ap.parse_args()
    run_dir = tempfile.mkdtemp(prefix="ts_train_dp_")
    argv = [a.binary, "launch", "-n", str(a.ranks), "--run-dir", run_dir, "--",
            a.binary, "train", "--config", a.config]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=100)
    if p.returncode != 0:
        print("launch failed:", p.returncode, p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        return 1
    steps = json.load(open(a.config))["train"]["steps"]
    sums = []
    for r in range(a.ranks):
        w = json.load(open(os.path.join(run_dir, "train", f"weights.rank{r}.json")))
        assert w["format"] == "trainscope.train_weights" and w["rank"] == r, w
        assert w["world_size"] == a.ranks, w
        assert w["step"] == steps, (w["step"], steps)
        sums.append(w["xxh3_64"])
        lines = [json.loads(l) for l in open(os.path.join(run_dir, "train", f"metrics.rank{r}.jsonl"))]
        assert lines[0]["type"] == "header" and lines[0]["world_size"] == a.ranks
        step_lines = [l for l in lines if l["type"] == "step"]
        assert len(step_lines) == steps, len(step_lines)
        # The gradient all-reduces ran on the communicator (comm_ms > 0 every step); the
        # exposed part of them is the comm_wait phase.
        assert all(l["comm_ms"] > 0 and l["phases_ms"]["comm_wait"] >= 0 for l in step_lines), \
            [(l["comm_ms"], l["phases_ms"]["comm_wait"]) for l in step_lines]
    if len(set(sums)) != 1:
        print("ranks ended with different weights:", sums)
        return 1
    # Both ranks' weights changed from the initial (broadcast) weights: training happened.
    losses = [l["loss"] for l in step_lines]
    if not losses[-1] < losses[0]:
        print("loss did not fall:", losses)
        return 1
    print(f"ok: {a.ranks} ranks, {steps} steps, identical weights xxh3_64 {sums[0]}, "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
