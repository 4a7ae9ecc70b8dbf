#!/usr/bin/python3
"""Non-finite localisation end to end: `trainscope launch -n 2 -- trainscope train --inject ...`.

Matrix (issue 14, Done-when): every numeric --inject kind x layer {0, 1} x step {early, late}
x rank {0, 1} where the kind takes a rank, on a 2-layer model (tests/data/train/
nonfinite_tiny.json). Every run must exit 1, print one sentence naming step, rank, module and
phase, and both ranks' metrics files must hold the same "nonfinite" record with the expected
step, rank, phase and module (and parameter, class, reproducible where they are determined):

  nan_forward:layer=L,step=S,rank=R   forward,   blocks.L.fc,      rank R, reproducible
  nan_backward:layer=L,step=S,rank=R  backward,  blocks.L.fc_proj, rank R, reproducible
  inf_weight:layer=L,step=S           forward,   blocks.L.fc,      rank 0 (all), nonfinite_weight
  lr_spike:factor=1e30,step=S         forward at S+1, blocks.0.ln1, rank 0 (all), lr_too_high
  nan_data:step=S,rank=R              forward,   wte,              rank R, bad_data

nan_forward and nan_backward, with three factors (layer x step x rank), run a half of their
8 cases each (18 runs in all, not 26; --full runs every case): nan_forward the cases with
layer + step index + rank even, nan_backward the other half. Each half still has every pair of
two factors (each layer at each step, each layer on each rank, each step on each rank), and
the two together every layer x step x rank once: the record's step, rank and module follow
from the step, the rank and the layer separately, and the rest of the runs repeated those.

Then: an anomaly checkpoint was written (a "checkpoint" record with anomaly true), a healthy
2-rank run has no record and exits 0, a single-rank `train --json` puts the same object under
"nonfinite", and a moderate lr_spike gives a "spike" record one step later.

Progress: one line per case. Exit 0 when every case passed, 1 otherwise.
"""
import argparse, glob, json, os, shutil, subprocess, sys, tempfile, time


def run(argv, timeout_s):
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, time.monotonic() - t0, out, ""
    return p.returncode, time.monotonic() - t0, p.stdout, p.stderr


def launch(a, run_dir, train_args, nproc=2):
    argv = [a.binary, "launch", "-n", str(nproc), "--no-bind-cpus", "--stop-grace-s", "2",
            "--run-dir", run_dir, "--", a.binary, "train", "--config", a.config] + train_args
    rc, secs, out, err = run(argv, a.timeout)
    return rc, secs, out + err


def records(run_dir, rank, kind):
    path = os.path.join(run_dir, "train", f"metrics.rank{rank}.jsonl")
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("type") == kind:
                    out.append(j)
    except OSError:
        pass
    return out


def expected(kind, layer, step, rank):
    if kind == "nan_forward":
        return {"step": step, "rank": rank, "ranks": [rank], "phase": "forward",
                "module": f"blocks.{layer}.fc", "parameter": "", "reproducible": True}
    if kind == "nan_backward":
        return {"step": step, "rank": rank, "ranks": [rank], "phase": "backward",
                "module": f"blocks.{layer}.fc_proj", "reproducible": True}
    if kind == "inf_weight":
        return {"step": step, "rank": 0, "ranks": [0, 1], "phase": "forward",
                "module": f"blocks.{layer}.fc", "parameter": f"blocks.{layer}.fc.weight",
                "class": "nonfinite_weight", "reproducible": True}
    if kind == "lr_spike":
        # Step S's update blows the weights up to ~1e28 (finite); step S+1's first LayerNorm
        # overflows computing the variance of such inputs.
        return {"step": step + 1, "rank": 0, "ranks": [0, 1], "phase": "forward",
                "module": "blocks.0.ln1", "parameter": "", "class": "lr_too_high",
                "reproducible": True}
    if kind == "nan_data":
        return {"step": step, "rank": rank, "ranks": [rank], "phase": "forward", "module": "wte",
                "class": "bad_data", "reproducible": True}
    raise ValueError(kind)


def spec_of(kind, layer, step, rank):
    if kind == "lr_spike":
        return f"lr_spike:factor=1e30,step={step}"
    if kind == "nan_data":
        return f"nan_data:step={step},rank={rank}"
    if kind == "inf_weight":
        return f"inf_weight:layer={layer},step={step}"
    return f"{kind}:layer={layer},step={step},rank={rank}"


def check_case(a, kind, layer, step, rank, tmp):
    spec = spec_of(kind, layer, step, rank)
    run_dir = os.path.join(tmp, spec.replace(":", "_").replace(",", "_").replace("=", ""))
    rc, secs, out = launch(a, run_dir, ["--inject", spec])
    want = expected(kind, layer, step, rank)
    problems = []
    if rc != 1:
        problems.append(f"exit {rc}, expected 1")
    recs = [records(run_dir, r, "nonfinite") for r in (0, 1)]
    got = recs[0][0] if recs[0] else None
    if got is None:
        problems.append("no nonfinite record on rank 0")
    else:
        if len(recs[0]) != 1 or recs[1] != recs[0]:
            problems.append(f"ranks disagree or several records: {recs}")
        for k, v in want.items():
            if got.get(k) != v:
                problems.append(f"{k} {got.get(k)!r}, expected {v!r}")
        if kind == "nan_backward" and not str(got.get("parameter", "")).startswith(
                want["module"] + "."):
            problems.append(f"parameter {got.get('parameter')!r} not in {want['module']}")
        sentence = f"non-finite values at step {want['step']} on rank {want['rank']}"
        if sentence not in out or want["module"] not in out or f"phase {want['phase']}" not in out:
            problems.append(f"no sentence naming step, rank, module and phase in the output")
        if not got.get("fix"):
            problems.append("no fix")
    ck = [c for c in records(run_dir, 0, "checkpoint") if c.get("anomaly")]
    if not ck or not all(c.get("ok") for c in ck):
        problems.append(f"no anomaly checkpoint written ({ck})")
    name = spec
    print(f"[{'ok' if not problems else 'FAIL'}] {name}: exit {rc}, {secs:.1f} s"
          + (f", {got.get('class')} {got.get('module')} {got.get('phase')}" if got else ""),
          flush=True)
    if problems:
        print("  " + "\n  ".join(problems), flush=True)
        print("  output tail:\n    " + "\n    ".join(out.splitlines()[-8:]), flush=True)
    elif not a.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return not problems


def check_healthy(a, tmp):
    run_dir = os.path.join(tmp, "healthy")
    rc, secs, out = launch(a, run_dir, [])
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}:\n{out[-2000:]}")
    for r in (0, 1):
        if records(run_dir, r, "nonfinite"):
            problems.append(f"rank {r}: a nonfinite record in a healthy run")
    print(f"[{'ok' if not problems else 'FAIL'}] healthy 2-rank run: exit {rc}, {secs:.1f} s",
          flush=True)
    for p in problems:
        print("  " + p, flush=True)
    return not problems


def check_single_json(a, tmp):
    """One rank, `--json`: the record's object under "nonfinite" on stdout."""
    run_dir = os.path.join(tmp, "single")
    rc, secs, out, err = run([a.binary, "train", "--config", a.config, "--run-dir", run_dir,
                              "--json", "--inject", "nan_backward:layer=1,step=3"], a.timeout)
    problems = []
    if rc != 1:
        problems.append(f"exit {rc}, expected 1: {err[-500:]}")
    try:
        j = json.loads(out)
    except ValueError:
        j = {}
        problems.append(f"stdout is not JSON: {out[-300:]!r}")
    rec = records(run_dir, 0, "nonfinite")
    if not rec or j.get("nonfinite") != rec[0]:
        problems.append(f"--json nonfinite {j.get('nonfinite')} != record {rec}")
    elif (rec[0]["step"], rec[0]["rank"], rec[0]["phase"], rec[0]["module"]) != (
            3, 0, "backward", "blocks.1.fc_proj"):
        problems.append(f"wrong localisation {rec[0]}")
    lines = [l for l in err.splitlines() if "non-finite values at step 3 on rank 0" in l]
    if len(lines) != 1:
        problems.append(f"expected one error sentence on stderr, got: {err[-500:]}")
    print(f"[{'ok' if not problems else 'FAIL'}] single rank --json: exit {rc}, {secs:.1f} s",
          flush=True)
    for p in problems:
        print("  " + p, flush=True)
    return not problems


def check_spike(a, tmp):
    """lr_spike with a moderate factor: finite, but the next step's loss jumps."""
    run_dir = os.path.join(tmp, "spike")
    rc, secs, out, err = run([a.binary, "train", "--config", a.spike_config, "--run-dir",
                              run_dir, "--inject", "lr_spike:factor=300,step=7"], a.timeout)
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}: {err[-800:]}")
    spikes = records(run_dir, 0, "spike")
    if not spikes or spikes[0].get("step") != 8:
        problems.append(f"spike records {spikes}, expected the first at step 8")
    elif not spikes[0].get("samples"):
        problems.append("no sample indices in the spike record")
    if "loss spike at step 8" not in err:
        problems.append(f"no warning: {err[-500:]}")
    ck = [c for c in records(run_dir, 0, "checkpoint") if c.get("anomaly") and c.get("step") == 8]
    if not ck:
        problems.append("no anomaly checkpoint at step 8")
    print(f"[{'ok' if not problems else 'FAIL'}] loss spike: exit {rc}, {secs:.1f} s", flush=True)
    for p in problems:
        print("  " + p, flush=True)
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True, help="tests/data/train/nonfinite_tiny.json")
    ap.add_argument("--spike-config", required=True, help="tests/data/train/spike_tiny.json")
    ap.add_argument("--kinds", default="nan_forward,nan_backward,inf_weight,lr_spike,nan_data")
    ap.add_argument("--layers", default="0,1")
    ap.add_argument("--steps", default="2,5")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--full", action="store_true",
                    help="every layer x step x rank of nan_forward and nan_backward")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_nonfinite_matrix_")
    t0 = time.monotonic()
    ok = True
    n = 0
    try:
        for kind in a.kinds.split(","):
            layers = [int(x) for x in a.layers.split(",")]
            if kind in ("lr_spike", "nan_data"):
                layers = [-1]
            ranks = [-1] if kind in ("inf_weight", "lr_spike") else [0, 1]
            half = {"nan_forward": 0, "nan_backward": 1}.get(kind)
            for layer in layers:
                for s, step in enumerate(int(x) for x in a.steps.split(",")):
                    for rank in ranks:
                        if not a.full and half is not None and (layer + s + rank) % 2 != half:
                            continue  # the other half (see the docstring)
                        ok = check_case(a, kind, layer, step, rank, tmp) and ok
                        n += 1
        ok = check_healthy(a, tmp) and ok
        ok = check_single_json(a, tmp) and ok
        ok = check_spike(a, tmp) and ok
    except BaseException:
        ok = False
        raise
    finally:
        print(f"{'PASSED' if ok else 'FAILED'}: {n} injections in {time.monotonic() - t0:.0f} s"
              f"{' (runs kept in ' + tmp + ')' if not ok or a.keep else ''}", flush=True)
        if ok and not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
