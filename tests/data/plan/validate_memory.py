#!/usr/bin/python3
"""Memory-model validation of `trainscope plan` against the CPU trainer (issue 19, item 2).

For each config: the trainer's peak RSS (`/usr/bin/time -f %M`, the process is trainscope-torch
after the exec) minus the peak RSS of the baseline config (mem_base.json: the same corpus, loader
and threads with a model of ~1 MB), against `trainscope plan --config CFG --devices 1` for the
single-device, no-ZeRO, no-recompute candidate at the config's micro-batch (minus the plan's
figure for the baseline). Prints a Markdown table; exit 1 when a config is off by more than 15%.

usage: tests/data/plan/validate_memory.py --binary build/bin/trainscope [CONFIG...]
"""
import argparse, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def peak_rss_bytes(binary, config):
    with tempfile.TemporaryDirectory(prefix="ts_plan_val_") as run_dir:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", binary, "train", "--config", config,
                            "--run-dir", run_dir, "--json"], capture_output=True, text=True,
                           env=dict(os.environ, TRAINSCOPE_NO_PROGRESS="1"))
        if p.returncode != 0:
            sys.exit(f"train {config} failed ({p.returncode}): {p.stderr[-2000:]}")
        return int(p.stderr.strip().splitlines()[-1]) * 1024


def plan_bytes(binary, config):
    with open(config) as f:
        mb = json.load(f)["train"]["micro_batch"]
    p = subprocess.run([binary, "plan", "--config", config, "--devices", "1", "--device-memory",
                        "1000", "--tp", "1", "--pp", "1", "--zero", "0", "--recompute", "none",
                        "--micro-batch", str(mb), "--global-batch", str(mb), "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"plan {config} failed ({p.returncode}): {p.stderr}")
    s = json.loads(p.stdout)["strategies"][0]["memory_gb"]
    return s["total"] * 1e9, (s["total"] - s["allowance"]) * 1e9, s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("configs", nargs="*",
                    default=[os.path.join(HERE, n) for n in ("mem_a.json", "mem_b.json", "mem_c.json")])
    a = ap.parse_args()
    base = os.path.join(HERE, "mem_base.json")
    base_rss = peak_rss_bytes(a.binary, base)
    base_plan, base_plan_raw, _ = plan_bytes(a.binary, base)
    print(f"baseline {os.path.basename(base)}: peak RSS {base_rss / 1e6:.1f} MB, plan {base_plan / 1e6:.2f} MB\n")
    print("| config | model | measured MB (peak RSS - baseline) | plan MB (with 10% allowance) | error | "
          "plan MB without allowance | error | states / activations MB |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for c in a.configs:
        with open(c) as f:
            m = json.load(f)["model"]
        rss = peak_rss_bytes(a.binary, c) - base_rss
        total, raw, s = plan_bytes(a.binary, c)
        total -= base_plan
        raw -= base_plan_raw
        err, err_raw = total / rss - 1, raw / rss - 1
        worst = max(worst, abs(err))
        print(f"| {os.path.basename(c)} | L{m['layers']} H{m['heads']} C{m['width']} T{m['seq_len']} | "
              f"{rss / 1e6:.1f} | {total / 1e6:.1f} | {100 * err:+.1f}% | {raw / 1e6:.1f} | "
              f"{100 * err_raw:+.1f}% | {1e3 * (s['params'] + s['grads'] + s['optimizer']):.1f} / "
              f"{1e3 * s['activations']:.1f} |")
    print(f"\nworst error {100 * worst:.1f}% (limit 15%)")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
