#!/usr/bin/python3
"""Data-parallel check: `trainscope launch -n 2 -- trainscope train --config CONFIG` must end
with bit-identical weights on both ranks (weights.rank<R>.json xxh3_64), valid metrics files
on both ranks, and every rank having run every step. Exits non-zero with the reason."""
import argparse, json, os, signal, subprocess, sys, tempfile, time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--kill-rank", type=int, default=-1,
                    help="SIGKILL this rank after its first step: the launcher then stops the "
                         "others with SIGTERM, and each of them must end its metrics file")
    a = ap.parse_args()
    if a.kill_rank >= 0:
        return kill_rank(a)
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
        assert lines[-1]["type"] == "end" and lines[-1]["reason"] == "done", lines[-1]
        assert lines[-2]["type"] == "summary", lines[-2]["type"]
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


def kill_rank(a):
    """One rank dies by SIGKILL mid-run; every other rank's metrics file must end with an
    "end" record (reason "interrupted" when the launcher's SIGTERM came first, "error" when
    the failed collective did), and the killed rank's file has none."""
    run_dir = tempfile.mkdtemp(prefix="ts_train_dp_kill_")
    argv = [a.binary, "launch", "-n", str(a.ranks), "--run-dir", run_dir, "--",
            a.binary, "train", "--config", a.config, "--steps", "1000000", "--max-seconds", "60"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = lambda r: os.path.join(run_dir, "train", f"metrics.rank{r}.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(path(a.kill_rank)) and '"type":"step"' in open(path(a.kill_rank)).read():
            break
        if p.poll() is not None:
            print("launch ended before the first step:", p.returncode, p.communicate())
            return 1
        time.sleep(0.05)
    else:
        p.kill()
        print("no step from rank", a.kill_rank)
        return 1
    pid = json.loads(open(path(a.kill_rank)).readline())["pid"]
    os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    if p.returncode == 0:
        print("launch succeeded although rank", a.kill_rank, "was killed")
        return 1
    for r in range(a.ranks):
        lines = [json.loads(l) for l in open(path(r)) if l.endswith("\n")]
        last = lines[-1]
        if r == a.kill_rank:
            assert last["type"] != "end", last  # SIGKILL: no code ran, no end record
            continue
        assert last["type"] == "end", (r, last, err[-2000:])
        assert last["reason"] in ("interrupted", "error"), last
        assert last["rank"] == r and last["step"] >= 1, last
        assert last.get("signal") == "SIGTERM" or last.get("error"), last
    print(f"ok: rank {a.kill_rank} killed; the other ranks ended their metrics files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
