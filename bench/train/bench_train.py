#!/usr/bin/python3
"""Trainer benchmark: figures as ratios measured side by side in one run.

  1. trainscope train vs the Python PyTorch peer (bench/train/peer.py): same model, data
     order, hyperparameters and thread count. tokens/s ratio (target >= 1.0) from the median
     step time after warm-up; loss curves compared with the seed-to-seed noise of trainscope
     itself (agree when |cpp - py| <= 2 x |seed A - seed B| + 0.05, averaged after step 10).
     In the same interleaved rounds, trainscope with train.keep_host_memory false (glibc's
     default trimming and mmap threshold) shows what keeping freed host memory is worth.
  2. Observability on vs off: ratio of the medians of each run's median step time, runs
     interleaved off/on, on/off, ... (target <= 1.02).
  3. 2 ranks over gloo (`trainscope launch -n 2`, 1 thread each) vs 1 rank (1 thread):
     scaling efficiency = tokens/s(2) / (2 x tokens/s(1)); overlap = the share of the
     gradient all-reduce time hidden behind backward (1 - comm_wait / comm).

Usage: bench/train/bench_train.py --binary build/bin/trainscope [--steps 60] [--out FILE]
"""
import argparse, copy, json, os, platform, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable  # the venv's Python (README): torch 2.x


def run(argv, env=None, timeout=900):
    e = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    # Same OpenMP wait policy for trainscope and the peer (trainscope would otherwise
    # re-exec itself with PASSIVE; see include/trainscope/train/omp.h).
    e.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    e.update(env or {})
    p = subprocess.run(argv, capture_output=True, text=True, env=e, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(argv)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def steps_of(run_dir, rank=0):
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "train", f"metrics.rank{rank}.jsonl"))]
    return [l for l in lines if l["type"] == "step"]


def median_after(xs, skip=2):
    return statistics.median(xs[skip:] if len(xs) > skip + 2 else xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", default=os.path.join(HERE, "bench_config.json"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default="")
    ap.add_argument("--skip-dp", action="store_true")
    ap.add_argument("--pairs", type=int, default=4, help="interleaved trainscope/peer run pairs")
    ap.add_argument("--obs-runs", type=int, default=4, help="observability on/off runs of each kind")
    ap.add_argument("--threads", type=int, default=0, help="override train.threads (both sides)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_bench_train_")
    base = json.load(open(a.config))
    base["train"]["steps"] = a.steps
    if a.threads:
        base["train"]["threads"] = a.threads
    base["train"]["layer_norms_every"] = max(base["train"].get("layer_norms_every", 50), 1)

    def cfg_file(name, mutate=None):
        c = copy.deepcopy(base)
        if mutate:
            mutate(c)
        path = os.path.join(tmp, name + ".json")
        json.dump(c, open(path, "w"))
        return path

    def cpp(name, cfg):
        d = os.path.join(tmp, name)
        run([a.binary, "train", "--config", cfg, "--run-dir", d, "--json"])
        s = steps_of(d)
        return d, [x["loss"] for x in s], [x["step_ms"] for x in s]

    out = {"argv": sys.argv, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
           "load_average_start": os.getloadavg(), "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "steps": a.steps, "config": base}
    tokens_per_step = base["model"]["seq_len"] * base["train"]["micro_batch"] * base["train"].get("grad_accum", 1)

    # 1. trainscope vs PyTorch peer, interleaved: cpp, py, cpp(seed+1), py, cpp, py, ...
    main_cfg = cfg_file("main")
    d_a, loss_a, ms_a = cpp("cpp_a", main_cfg)
    resolved = os.path.join(d_a, "train", "config.json")
    peer = json.loads(run([PY, os.path.join(HERE, "peer.py"), "--config", resolved]))
    seed_cfg = cfg_file("seed2", lambda c: c["train"].__setitem__("seed", c["train"]["seed"] + 1))
    d_b, loss_b, ms_b = cpp("cpp_b", seed_cfg)
    peer2 = json.loads(run([PY, os.path.join(HERE, "peer.py"), "--config", resolved]))
    cpp_runs, py_runs = [median_after(ms_a), median_after(ms_b)], [median_after(peer["step_ms"]), median_after(peer2["step_ms"])]
    glibc_cfg = cfg_file("glibc_default", lambda c: c["train"].__setitem__("keep_host_memory", False))
    glibc_runs = []
    for i in range(a.pairs):
        if i >= 2:
            _, _, ms = cpp(f"cpp_extra{i}", main_cfg)
            p3 = json.loads(run([PY, os.path.join(HERE, "peer.py"), "--config", resolved]))
            cpp_runs.append(median_after(ms)); py_runs.append(median_after(p3["step_ms"]))
        _, _, ms_g = cpp(f"cpp_glibc{i}", glibc_cfg)
        glibc_runs.append(median_after(ms_g))
    out["vs_pytorch_runs_step_ms"] = {"cpp": cpp_runs, "py": py_runs, "cpp_keep_host_memory_false": glibc_runs}
    cpp_ms = statistics.median(cpp_runs)
    py_ms = statistics.median(py_runs)
    start = min(10, a.steps // 2)
    mean_abs = lambda x, y: statistics.mean(abs(p - q) for p, q in zip(x[start:], y[start:]))
    noise = mean_abs(loss_a, loss_b)
    diff = mean_abs(loss_a, peer["losses"])
    out["vs_pytorch"] = {
        "cpp_step_ms_median": cpp_ms, "py_step_ms_median": py_ms,
        "cpp_tokens_per_s": tokens_per_step * 1000 / cpp_ms,
        "py_tokens_per_s": tokens_per_step * 1000 / py_ms,
        "tokens_per_s_ratio": py_ms / cpp_ms,
        "tokens_per_s_ratio_keep_host_memory_false": py_ms / statistics.median(glibc_runs),
        "loss_cpp_final": loss_a[-1], "loss_py_final": peer["losses"][-1],
        "loss_mean_abs_diff_cpp_vs_py": diff, "loss_mean_abs_diff_seed_noise": noise,
        "losses_agree": diff <= 2 * noise + 0.05,
        "torch": peer["torch"], "threads": peer["threads"],
    }

    # 2. Observability on vs off, interleaved (off, on, on, off, off, on) so drifting load
    #    hits both alike; each run's median step time, the median over runs of each kind;
    #    plus the in-run share of time spent in observability code.
    off_cfg = cfg_file("obs_off", lambda c: c["train"].__setitem__("observability", False))
    on_ms, off_ms, obs_frac = [], [], []
    kinds = [k for i in range(a.obs_runs) for k in (("off", "on") if i % 2 == 0 else ("on", "off"))]
    for i, kind in enumerate(kinds):
        cfg = off_cfg if kind == "off" else main_cfg
        r = json.loads(run([a.binary, "train", "--config", cfg, "--run-dir", os.path.join(tmp, f"obs{i}"), "--json"]))
        (off_ms if kind == "off" else on_ms).append(r["median_step_ms"])
        if kind == "on":
            obs_frac.append(r["observability_fraction"])
    out["observability"] = {"on_step_ms": on_ms, "off_step_ms": off_ms,
                            "overhead_ratio": statistics.median(on_ms) / statistics.median(off_ms),
                            "in_run_fraction": statistics.mean(obs_frac)}

    # 3. Data parallel: 2 ranks x 1 thread vs 1 rank x 1 thread (same per-rank batch).
    if not a.skip_dp:
        one_cfg = cfg_file("one_thread", lambda c: c["train"].__setitem__("threads", 1))
        r1 = json.loads(run([a.binary, "train", "--config", one_cfg, "--run-dir", os.path.join(tmp, "dp1"), "--json"]))
        d2 = os.path.join(tmp, "dp2")
        run([a.binary, "launch", "-n", "2", "--run-dir", d2, "-q", "--", a.binary, "train", "--config", one_cfg])
        s2 = json.load(open(os.path.join(d2, "train", "summary.json")))
        out["data_parallel"] = {
            "tokens_per_s_1rank": r1["tokens_per_s"], "tokens_per_s_2ranks": s2["tokens_per_s"],
            "scaling_efficiency": s2["tokens_per_s"] / (2 * r1["tokens_per_s"]),
            "step_ms_1rank": r1["mean_step_ms"], "step_ms_2ranks": s2["mean_step_ms"],
            "phases_ms_2ranks": s2["mean_phases_ms"], "comm_ms_2ranks": s2["mean_comm_ms"],
            "overlap_fraction": s2["overlap_fraction"],
        }
    out["load_average_end"] = os.getloadavg()
    text = json.dumps(out, indent=2)
    if a.out:
        open(a.out, "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
