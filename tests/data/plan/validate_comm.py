#!/usr/bin/python3
"""Communication-volume validation of `trainscope plan` against the flight recorder (issue 19).

Runs `trainscope launch -n 2 -- trainscope train --config CFG --inject exit:rank=1,step=S`
(S = the config's last step): rank 1 leaves at step S, rank 0 blocks in that step's first
all-reduce, and the launcher asks it for its flight recorder dump (docs/formats.md). The bytes
of the completed gradient all-reduces ("step N grad bucket B" caller tags) of each earlier step
are summed and turned into bytes sent per rank by the ring factor 2(n-1)/n, against `plan
--devices 2 --tp 1 --pp 1 --zero 0`'s comm_gb_per_step for the config's micro-batch and
accumulation. Prints a Markdown table; exit 1 when a config is off by more than 1%.

usage: tests/data/plan/validate_comm.py --binary build/bin/trainscope [CONFIG...]
"""
import argparse, collections, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPE_BYTES = {"Float": 4, "BFloat16": 2, "Half": 2, "Int": 4, "Long": 8}


def recorded_bytes_per_step(binary, config):
    with open(config) as f:
        steps = json.load(f)["train"]["steps"]
    with tempfile.TemporaryDirectory(prefix="ts_plan_comm_") as run_dir:
        subprocess.run([binary, "launch", "-n", "2", "--run-dir", run_dir, "--", binary, "train",
                        "--config", config, "--inject", f"exit:rank=1,step={steps}"],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRAINSCOPE_NO_PROGRESS="1"))
        with open(os.path.join(run_dir, "hang", "flight_recorder.rank0.json")) as f:
            dump = json.load(f)
    per_step = collections.defaultdict(int)
    loss = collections.defaultdict(int)
    for e in dump["entries"]:
        caller = e.get("caller", "")
        if not caller.startswith("step ") or e["state"] != "completed":
            continue
        n = sum(x for s in e["input_sizes"] for x in s)
        b = n * DTYPE_BYTES[e["input_dtypes"][0]]
        (per_step if " grad bucket " in caller else loss)[int(caller.split()[1])] += b
    return per_step, loss


def plan_bytes(binary, config):
    with open(config) as f:
        t = json.load(f)["train"]
    mb, accum = t["micro_batch"], t.get("grad_accum", 1)
    p = subprocess.run([binary, "plan", "--config", config, "--devices", "2", "--device-memory",
                        "1000", "--tp", "1", "--pp", "1", "--zero", "0", "--recompute", "none",
                        "--micro-batch", str(mb), "--global-batch", str(2 * mb * accum), "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"plan {config} failed ({p.returncode}): {p.stderr}")
    s = json.loads(p.stdout)["strategies"][0]
    return s["comm_gb_per_step"] * 1e9, s["micro_batches"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("configs", nargs="*", default=[
        os.path.join(HERE, "..", "train", "dp_tiny.json"), os.path.join(HERE, "mem_a.json")])
    a = ap.parse_args()
    n = 2
    ring = 2 * (n - 1) / n
    print("| config | steps counted | accumulation | all-reduced gradient bytes per step (recorder) | "
          "sent per rank = x 2(n-1)/n | plan comm per step | error | loss all-reduce bytes |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for c in a.configs:
        per_step, loss = recorded_bytes_per_step(a.binary, c)
        if not per_step:
            sys.exit(f"{c}: the dump holds no completed gradient all-reduce")
        sizes = set(per_step.values())
        recorded = max(sizes)
        planned, m = plan_bytes(a.binary, c)
        err = planned / (recorded * ring) - 1
        worst = max(worst, abs(err))
        print(f"| {os.path.basename(c)} | {len(per_step)} | {m} | {recorded:,}"
              f"{'' if len(sizes) == 1 else ' (varies: ' + str(sorted(sizes)) + ')'} | "
              f"{recorded * ring:,.0f} | {planned:,.0f} | {100 * err:+.2f}% | {max(loss.values(), default=0)} |")
    print(f"\nworst error {100 * worst:.2f}% (limit 1%)")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
