#!/usr/bin/env python3
"""fr_trace_bench: `trainscope hang analyze` side by side with PyTorch's own Flight Recorder
analyser (`python -m torch.distributed.flight_recorder.fr_trace`) on the same real dumps.

The dumps: --ranks gloo ranks on the CPU (torch from this interpreter, a FileStore
rendezvous) run a broadcast and --steps training steps of two gradient-bucket all_reduces;
in the last step one rank skips the second all_reduce and the others block in it. Each
rank's watchdog thread then dumps its recorder with torch's own
`_dump_fr_trace_file(rank, includeStackTraces=True)` (pickle), so the rings are full
(TORCH_FR_BUFFER_SIZE 2,000, wrapped: 2 x steps + 1 collectives per rank).

torch 2.15's gloo dumps name their group "" in pg_config (ProcessGroupGloo registers it
before torch.distributed names it) and fr_trace stops on them with KeyError ('0', rank).
Then both tools are timed on a copy whose pg_config is re-keyed to the entries' group (the
same bytes for both), and trainscope's verdict on the originals must equal its verdict on
the copy.

Timed, interleaved, best of --repeat: `trainscope hang analyze DIR --json` (the process;
also on the originals when re-keyed), fr_trace as a process (interpreter, `import torch`
and analysis: what a user waits for), and fr_trace's `main()` inside one warm interpreter
(its analysis alone). Both verdicts are
checked against the staged hang (rank, all_reduce, sequence id, record id); exit 1 if
either is wrong or they disagree.

  .venv/bin/python bench/hang/fr_trace_bench.py [--binary build/bin/trainscope]
      [--ranks 4] [--steps 1200] [--repeat 3] [--dir DIR (kept)] [-o out.json]
Prints one JSON object: argv, versions, machine, sizes, seconds, ratios, verdicts.
"""
import argparse
import glob
import json
import os
import pickle
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

PREFIX = "gloo_trace_rank_"
BUCKETS = (64, 16)

# One rank: argv rank world culprit steps workdir. ready.<r> at the hang point, dumped.<r>
# after the dump; dump.now (from the bench) triggers the dump, exit.now the exit.
WORKER = textwrap.dedent("""
    import datetime, os, sys, threading, time
    import torch, torch.distributed as dist
    from torch._C import _distributed_c10d as c10d
    rank, world, culprit, steps = map(int, sys.argv[1:5])
    work = sys.argv[5]
    BUCKETS = %(buckets)r
    def mark(name):
        open(os.path.join(work, "." + name), "w").close()
        os.replace(os.path.join(work, "." + name), os.path.join(work, name))
    def wait_for(name):
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(work, name)):
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.05)
    def watchdog():  # a rank that left early would break the others' connections
        wait_for("dump.now")
        c10d._dump_fr_trace_file(rank, includeStackTraces=True)
        mark(f"dumped.{rank}")
        wait_for("exit.now")
        os._exit(0)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "rendezvous"),
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    threading.Thread(target=watchdog, daemon=True).start()
    dist.broadcast(torch.zeros(8), src=0)
    for step in range(steps):
        for b, n in enumerate(BUCKETS):
            grad = torch.full((n,), float(rank + 1))
            if step == steps - 1 and b == len(BUCKETS) - 1:
                if rank == culprit:
                    mark(f"ready.{rank}")
                    wait_for("exit.now")
                    time.sleep(60)
                    os._exit(4)
                handle = dist.all_reduce(grad, async_op=True)
                mark(f"ready.{rank}")
                handle.wait()
                os._exit(5)
            dist.all_reduce(grad)
""") % {"buckets": BUCKETS}


def run_job(tmp, ranks, culprit, steps):
    work, dumps = os.path.join(tmp, "job"), os.path.join(tmp, "dumps")
    os.makedirs(work)
    os.makedirs(dumps)
    with open(os.path.join(tmp, "worker.py"), "w") as f:
        f.write(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_"))}
    env.update(TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=os.path.join(dumps, PREFIX),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.join(tmp, "worker.py"), str(r), str(ranks),
                               str(culprit), str(steps), work], env=env, cwd=work,
                              stdout=open(os.path.join(work, f"log.{r}"), "w"),
                              stderr=subprocess.STDOUT, start_new_session=True)
             for r in range(ranks)]
    try:
        for kind in ("ready", "dumped"):
            deadline = time.monotonic() + 300
            while len(glob.glob(os.path.join(work, kind + ".*"))) < ranks:
                if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                    sys.exit(f"fr_trace_bench: the job did not reach '{kind}' on every rank "
                             f"(exit codes {[p.poll() for p in procs]}; logs in {work} "
                             "with --dir)")
                time.sleep(0.05)
            if kind == "ready":
                time.sleep(0.3)
            open(os.path.join(work, "dump.now" if kind == "ready" else "exit.now"), "w").close()
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    return dumps


def load(folder):
    out = {}
    for path in glob.glob(os.path.join(folder, PREFIX + "*")):
        with open(path, "rb") as f:
            out[int(os.path.basename(path)[len(PREFIX):])] = pickle.load(f)
    return out


def rekeyed_copy(dumps, folder):
    os.makedirs(folder)
    for rank, d in dumps.items():
        (ranks,) = [c["ranks"] for c in d["pg_config"].values()]
        groups = {tuple(e["process_group"]) for e in d["entries"]}
        d = dict(d, pg_config={n: {"name": n, "desc": s, "ranks": ranks} for n, s in groups})
        with open(os.path.join(folder, PREFIX + str(rank)), "wb") as f:
            pickle.dump(d, f)


def timed(argv):
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t0, p


# fr_trace's main() repeated in one interpreter: its analysis without start-up and import.
FR_WARM = textwrap.dedent("""
    import contextlib, io, json, pickle, sys, time
    from torch.distributed.flight_recorder.fr_trace import main
    folder, prefix, db, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            main([folder, "--prefix", prefix, "-o", db])
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    _, d = pickle.load(open(db, "rb"))
    bad = [c for c in d.collectives if c.missing_ranks or not c.pass_check]
    print(json.dumps({"seconds": best, "flagged": [
        {"pg": c.group_id, "seq": c.collective_seq_id, "record_id": c.record_id,
         "op": c.collective_name.split(":")[-1], "missing": sorted(c.missing_ranks or [])}
        for c in bad]}))
""")


def ts_verdict(stdout):
    f = json.loads(stdout)["findings"]
    if not f:
        return None
    return {"pg": f[0]["pg"], "seq": f[0]["collective_seq_id"], "op": f[0]["op"],
            "missing": f[0]["culprit_ranks"], "kind": f[0]["kind"],
            "sentence": f[0]["sentence"], "findings": len(f)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/trainscope")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    import torch

    tmp = a.dir or tempfile.mkdtemp(prefix="ts-fr-bench-")
    os.makedirs(tmp, exist_ok=True)
    culprit = a.ranks // 2
    seq = 1 + 2 * a.steps
    try:
        t0 = time.perf_counter()
        originals = run_job(tmp, a.ranks, culprit, a.steps)
        job_s = time.perf_counter() - t0
        dumps = load(originals)
        record_id = dumps[0 if culprit else 1]["entries"][-1]["record_id"]
        fr_argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
        db = os.path.join(tmp, "fr_db.pkl")
        _, p = timed(fr_argv + [originals, "--prefix", PREFIX, "-o", db])
        rekeyed = p.returncode != 0
        if rekeyed:
            if not all(set(d["pg_config"]) == {""} for d in dumps.values()) or \
                    "KeyError: ('0'," not in p.stderr:
                sys.exit(f"fr_trace_bench: fr_trace failed on the dumps:\n{p.stderr}")
            folder = os.path.join(tmp, "dumps_rekeyed")
            rekeyed_copy(dumps, folder)
        else:
            folder = originals
        runs = {"trainscope": [a.binary, "hang", "analyze", folder, "--json"],
                "fr_trace_process": fr_argv + [folder, "--prefix", PREFIX, "-o", db]}
        if rekeyed:  # and on the bytes torch wrote, which only trainscope reads
            runs["trainscope_originals"] = [a.binary, "hang", "analyze", originals, "--json"]
        best, out = {name: None for name in runs}, {}
        for _ in range(a.repeat):  # interleaved
            for name, argv in runs.items():
                dt, p = timed(argv)
                if p.returncode not in (0, 1):
                    sys.exit(f"fr_trace_bench: {argv[0]} exit {p.returncode}:\n{p.stderr}")
                out[name] = p.stdout
                best[name] = dt if best[name] is None else min(best[name], dt)
        p = subprocess.run([sys.executable, "-c", FR_WARM, folder, PREFIX, db, str(a.repeat)],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"fr_trace_bench: fr_trace main() failed:\n{p.stderr}")
        warm = json.loads(p.stdout.strip().splitlines()[-1])
        best["fr_trace_analysis"] = warm["seconds"]
        fr = warm["flagged"]

        ts = ts_verdict(out["trainscope"])
        ts_orig = ts_verdict(out.get("trainscope_originals", out["trainscope"]))
        want = {"pg": "0", "seq": seq, "op": "all_reduce", "missing": [culprit]}
        ts_right = ts is not None and {k: ts[k] for k in want} == want and ts["findings"] == 1 \
            and ts_orig == ts
        fr_right = len(fr) == 1 and fr[0] == dict(want, record_id=record_id)
        agree = ts_right and fr_right
        sizes = [os.path.getsize(p) for p in glob.glob(os.path.join(folder, PREFIX + "*"))]
        result = {
            "argv": sys.argv,
            "versions": {"torch": torch.__version__, "python": platform.python_version(),
                         "trainscope": subprocess.run([a.binary, "--version"], capture_output=True,
                                                      text=True).stdout.strip()},
            "machine": {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg())},
            "ranks": a.ranks, "steps": a.steps,
            "entries_per_rank": [len(dumps[r]["entries"]) for r in sorted(dumps)],
            "bytes": sum(sizes), "job_seconds": job_s,
            "fr_trace_needed_rekeyed_pg_config": rekeyed,
            "seconds": best,
            "ratio_fr_trace_process_to_trainscope": best["fr_trace_process"] / best["trainscope"],
            "ratio_fr_trace_analysis_to_trainscope": best["fr_trace_analysis"] / best["trainscope"],
            "expected": dict(want, record_id=record_id),
            "verdicts": {"trainscope": ts, "trainscope_on_originals_same": ts_orig == ts,
                         "fr_trace": fr},
            "trainscope_right": ts_right, "fr_trace_right": fr_right, "agree": agree,
        }
        text = json.dumps(result, indent=2, sort_keys=True)
        print(text)
        if a.output:
            with open(a.output, "w") as f:
                f.write(text + "\n")
        return 0 if agree else 1
    finally:
        if not a.dir:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
