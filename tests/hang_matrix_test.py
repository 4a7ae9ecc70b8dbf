#!/usr/bin/python3
"""Hang diagnosis end to end: `trainscope launch -n N -- trainscope train --inject ...`.

Matrix: {skip_collective, wrong_op, wrong_size, wrong_dtype, sleep beyond the timeout, exit}
x world sizes {2, 4} x an early and a late step, on a tiny model with a 3 s comm timeout
(tests/data/train/hang_tiny.json), as a pairwise design (12 runs): every kind runs at both
world sizes and at both steps, and every (world size, step) pair with half of the kinds.
skip_collective, wrong_size and sleep take {ws 2 step 2, ws 4 step 9}; wrong_op, wrong_dtype
and exit take {ws 2 step 9, ws 4 step 2}. The culprit is rank 1 at the early step and the
last rank at the late one, so at ws 4 half of the kinds blame a middle rank and half the last.
The full product (--full: 24 runs) took twice as long, most of it in the two kinds that wait
out the comm timeout (wrong_op, sleep), and repeated pairs already covered: a verdict's kind
comes from the kind, the culprit from the world size and rank, the sequence number from the
step. Every run must stop by itself within timeout + 30 s, exit
non-zero, print the verdict, and <run_dir>/hang/analysis.json must name the injected rank,
the expected kind and the sequence number of the first collective of the injected step
(read from the dumps of the ranks that were not injected: the lowest collective_seq_id whose
caller tag is "step S ..."). Then healthy runs must finish with no finding: the short timeout
must not fire in a job that is merely slow. 4 runs, 2 at each world size (--healthy N; it was
10, the same two jobs five times each): the matrix's 12 runs are healthy up to their injected
step too, where a spurious timeout would change the verdict and fail the case.

--done-when runs the issue's acceptance command instead: configs/selftest_train_quick.json,
--comm-timeout 10, skip_collective on rank 1 at step 5: non-zero within a minute, the verdict
printed, and `trainscope hang analyze RUN_DIR --json` giving the launcher's analysis.json.

Progress: one line per case. Exit 0 when every case passed, 1 otherwise (each failure says
which case and what the dumps showed).
"""
import argparse, glob, json, os, shutil, subprocess, sys, tempfile, time

EXPECTED_KIND = {
    "skip_collective": "not_joined",
    "wrong_op": "type_mismatch",
    "wrong_size": "size_mismatch",
    "wrong_dtype": "dtype_mismatch",
    "sleep": "not_joined",  # the sleeper never entered the collective
    "exit": "missing_dump",
}


def launch(binary, run_dir, nproc, train_args, timeout_s):
    argv = [binary, "launch", "-n", str(nproc), "--no-bind-cpus", "--stop-grace-s", "2",
            "--run-dir", run_dir, "--", binary, "train"] + train_args
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        return None, time.monotonic() - t0, (e.stdout or b"").decode() + (e.stderr or b"").decode()
    return p.returncode, time.monotonic() - t0, p.stdout + p.stderr


def first_seq_of_step(run_dir, step, skip_rank):
    """Lowest collective_seq_id tagged "step S ..." in the dumps of the other ranks."""
    seqs = []
    for path in glob.glob(os.path.join(run_dir, "hang", "flight_recorder.rank*.json")):
        rank = int(path.rsplit("rank", 1)[1].split(".")[0])
        if rank == skip_rank:
            continue
        with open(path) as f:
            dump = json.load(f)
        for e in dump.get("entries", []):
            caller = e.get("caller") or ""
            if caller.startswith(f"step {step} ") and not e.get("is_p2p"):
                seqs.append(int(e["collective_seq_id"]))
    return min(seqs) if seqs else None


def describe_dumps(run_dir):
    """The last two entries of every dump, for failure messages."""
    lines = []
    for path in sorted(glob.glob(os.path.join(run_dir, "hang", "flight_recorder.rank*.json"))):
        with open(path) as f:
            dump = json.load(f)
        tail = [f"#{e['collective_seq_id']} {e.get('profiling_name')} {e.get('input_sizes')} "
                f"{e.get('input_dtypes')} {e.get('state')} '{e.get('caller')}'"
                for e in dump.get("entries", [])[-2:]]
        lines.append(f"    {os.path.basename(path)}: " + "; ".join(tail))
    return "\n".join(lines) or "    (no dumps)"


def check_case(a, kind, nproc, step, rank, tmp):
    name = f"{kind} ws={nproc} step={step} rank={rank}"
    run_dir = os.path.join(tmp, name.replace(" ", "_").replace("=", ""))
    spec = f"{kind}:rank={rank},step={step}"
    if kind == "sleep":
        spec += ",seconds=60"
    elif kind == "exit":
        spec += ",code=7"
    rc, secs, out = launch(a.binary, run_dir, nproc,
                           ["--config", a.config, "--comm-timeout", str(a.timeout), "--inject", spec],
                           a.timeout + 30)
    problems = []
    if rc is None:
        problems.append(f"did not stop within {a.timeout + 30} s")
    elif rc == 0:
        problems.append("exited 0")
    if rc is not None and "hang analysis (" not in out:
        problems.append("no verdict printed")
    analysis = None
    try:
        with open(os.path.join(run_dir, "hang", "analysis.json")) as f:
            analysis = json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"no hang/analysis.json ({e})")
    seq = first_seq_of_step(run_dir, step, rank)
    if analysis is not None:
        findings = analysis.get("findings", [])
        if not findings:
            problems.append("no finding")
        else:
            f0 = findings[0]
            want = EXPECTED_KIND[kind]
            if f0.get("kind") != want:
                problems.append(f"kind {f0.get('kind')!r}, expected {want!r}")
            if f0.get("culprit_ranks") != [rank]:
                problems.append(f"culprit_ranks {f0.get('culprit_ranks')}, expected [{rank}]")
            if seq is None:
                problems.append(f"no dump of another rank shows a collective tagged 'step {step}'")
            elif f0.get("collective_seq_id") != seq:
                problems.append(f"collective_seq_id {f0.get('collective_seq_id')}, expected {seq}")
            if problems:
                problems.append(f"verdict: {f0.get('sentence')}")
    status = "ok" if not problems else "FAIL"
    print(f"[{status}] {name}: exit {rc}, {secs:.1f} s, seq {seq}", flush=True)
    if problems:
        print("  " + "\n  ".join(problems), flush=True)
        print(describe_dumps(run_dir), flush=True)
    elif not a.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return not problems


def check_healthy(a, i, nproc, tmp):
    run_dir = os.path.join(tmp, f"healthy{i}")
    rc, secs, out = launch(a.binary, run_dir, nproc,
                           ["--config", a.config, "--comm-timeout", str(a.timeout)], 120)
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}:\n{out[-2000:]}")
    with open(os.path.join(run_dir, "launch.json")) as f:
        hang = json.load(f).get("hang")
    if hang is not None and (hang.get("problem") or hang.get("findings")):
        problems.append(f"finding in a healthy run: {hang}")
    if glob.glob(os.path.join(run_dir, "hang", "flight_recorder.*")):
        problems.append("a healthy rank dumped its flight recorder")
    print(f"[{'ok' if not problems else 'FAIL'}] healthy #{i} ws={nproc}: exit {rc}, {secs:.1f} s",
          flush=True)
    for p in problems:
        print("  " + p, flush=True)
    if not problems and not a.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return not problems


def done_when(a, tmp):
    """The issue's acceptance command, and `hang analyze` agreeing with the launcher."""
    run_dir = os.path.join(tmp, "done_when")
    rc, secs, out = launch(a.binary, run_dir, 2,
                           ["--config", a.quick_config, "--comm-timeout", "10",
                            "--inject", "skip_collective:rank=1,step=5"], 60)
    problems = []
    if rc is None or rc == 0:
        problems.append(f"exit {rc} after {secs:.1f} s (expected non-zero within 60 s)")
    if "hang analysis (" not in out:
        problems.append("no verdict printed")
    p = subprocess.run([a.binary, "hang", "analyze", run_dir, "--json"], capture_output=True,
                       text=True, timeout=60)
    try:
        mine = json.loads(p.stdout)
        with open(os.path.join(run_dir, "hang", "analysis.json")) as f:
            launcher = json.load(f)
    except (OSError, ValueError) as e:
        mine = launcher = None
        problems.append(f"cannot compare the analyses: {e}; hang analyze said: {p.stderr[-500:]}")
    if mine is not None:
        # The launcher wrote analysis.json before `hang analyze` ran: only the input listing
        # (one more skipped file) may differ.
        for j in (mine, launcher):
            j.get("details", {}).pop("inputs", None)
        if mine != launcher:
            problems.append("`hang analyze --json` differs from the launcher's analysis.json")
        if p.returncode != (1 if launcher.get("problem") else 0):
            problems.append(f"hang analyze exit {p.returncode}")
        f0 = (launcher.get("findings") or [{}])[0]
        seq = first_seq_of_step(run_dir, 5, 1)
        if (f0.get("kind"), f0.get("culprit_ranks"), f0.get("collective_seq_id")) != (
                "not_joined", [1], seq):
            problems.append(f"verdict {f0.get('kind')} {f0.get('culprit_ranks')} "
                            f"#{f0.get('collective_seq_id')}, expected not_joined [1] #{seq}")
    print(f"[{'ok' if not problems else 'FAIL'}] done-when: exit {rc}, {secs:.1f} s", flush=True)
    print("\n".join(l for l in out.splitlines()[-4:]), flush=True)
    for x in problems:
        print("  " + x, flush=True)
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True, help="tiny data-parallel config")
    ap.add_argument("--quick-config", help="configs/selftest_train_quick.json (--done-when)")
    ap.add_argument("--timeout", type=float, default=3.0, help="--comm-timeout of each run")
    ap.add_argument("--healthy", type=int, default=4)
    ap.add_argument("--kinds", default=",".join(EXPECTED_KIND))
    ap.add_argument("--world-sizes", default="2,4")
    ap.add_argument("--steps", default="2,9", help="early and late injected steps")
    ap.add_argument("--full", action="store_true",
                    help="every kind at every (world size, step), not the pairwise half")
    ap.add_argument("--done-when", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_hang_matrix_")
    t0 = time.monotonic()
    ok = True
    try:
        if a.done_when:
            ok = done_when(a, tmp)
        else:
            world_sizes = [int(x) for x in a.world_sizes.split(",")]
            steps = [int(x) for x in a.steps.split(",")]
            for k, kind in enumerate(a.kinds.split(",")):
                for w, nproc in enumerate(world_sizes):
                    for i, step in enumerate(steps):
                        # Pairwise: kind k takes step i at world size w where i = (w + k) % 2.
                        if not a.full and len(steps) == 2 and i != (w + k) % 2:
                            continue
                        rank = 1 if i == 0 else nproc - 1  # ws 4: early rank 1, late rank 3
                        ok = check_case(a, kind, nproc, step, rank, tmp) and ok
            for i in range(a.healthy):
                ok = check_healthy(a, i, 2 if i % 2 == 0 else 4, tmp) and ok
    finally:
        print(f"{'PASSED' if ok else 'FAILED'} in {time.monotonic() - t0:.0f} s"
              f"{' (runs kept in ' + tmp + ')' if not ok or a.keep else ''}", flush=True)
        if ok and not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
