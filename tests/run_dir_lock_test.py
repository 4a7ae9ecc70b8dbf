#!/usr/bin/env python3
"""One writer per run directory (issue 31 part 5; include/trainscope/core/run_dir_lock.h).

  * two trainers on one run directory: the second exits 2 at once (while the first still
    runs) with one line naming the first's pid; the first's metrics file is intact (every
    step once, in order, one "end" record) and so are its checkpoints;
  * the lock goes with the holder: a third trainer with --resume latest on the same
    directory resumes from the first's last checkpoint;
  * one job is one writer: `trainscope launch -n 2 --run-dir D -- trainscope train` (the
    ranks join the launcher's lock) and `launch -n 2 -- train --run-dir E` (the first rank
    holds E, the other joins) run; a second launch on D exits 2 naming the first launcher,
    and a second job's trainers on E are refused (the launch fails, rank 0's line names the
    holder); the first job, stopped with SIGINT once those were refused, has each rank's
    steps once and in order and one end record;
  * with --pythonpath: a Python writer (trainscope._core.lock_run_dir, what watch / record /
    checkpoint.save take) refuses a trainer the same way, and releases at exit.
Exit 0 when all hold, 1 with the first failure.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

STEPS = 3000  # about 3-8 s of the tiny model: long enough for a second writer to arrive
# The 2-rank job of launches() trains until the test stops it with SIGINT once the second
# launch and the second job were refused (about 2 s; 3000 steps were 30 s at 2 ranks).
# JOB_MAX_S only bounds an orphan's life when the test itself fails half-way.
JOB_STEPS, JOB_MAX_S = 1000000, 120


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def write_config(src, dst, every_steps):
    with open(src) as f:
        cfg = json.load(f)
    base = os.path.dirname(os.path.abspath(src))
    cfg["data"]["corpus"] = [os.path.join(base, c) for c in cfg["data"]["corpus"]]
    cfg["checkpoint"] = {"every_steps": every_steps, "keep": 2, "async": False}
    with open(dst, "w") as f:
        json.dump(cfg, f)


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for_steps(path, proc, n=1, timeout_s=60):
    """Until `path` holds n step records (the writer is training, so holds the lock)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            fail("the first writer ended (rc %s) before it wrote %d steps" % (proc.returncode, n))
        if os.path.exists(path):
            with open(path) as f:
                if sum('"type":"step"' in line for line in f) >= n:
                    return
        time.sleep(0.05)
    fail("no step records in %s after %d s" % (path, timeout_s))


def check_refusal(rc, stderr, holder_pid, what, want_rc=2):
    lines = [l for l in stderr.splitlines() if l.strip()]
    if rc != want_rc:
        fail("%s: exit %s, want %d; stderr:\n%s" % (what, rc, want_rc, stderr))
    named = [l for l in lines if "is in use by pid %d (" % holder_pid in l]
    if not named:
        fail("%s: no line names pid %d; stderr:\n%s" % (what, holder_pid, stderr))
    return lines


def two_trainers_then_resume(binary, config, tmp):
    run = os.path.join(tmp, "run")
    metrics = os.path.join(run, "train", "metrics.rank0.jsonl")
    first = subprocess.Popen([binary, "train", "--config", config, "--run-dir", run, "--steps",
                              str(STEPS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    wait_for_steps(metrics, first)
    t0 = time.time()
    second = subprocess.run([binary, "train", "--config", config, "--run-dir", run],
                            capture_output=True, text=True, timeout=60)
    took = time.time() - t0
    still_running = first.poll() is None
    lines = check_refusal(second.returncode, second.stderr, first.pid, "second trainer")
    if len(lines) != 1:
        fail("second trainer: %d stderr lines, want 1:\n%s" % (len(lines), second.stderr))
    if took > 10:  # exec + loading libtorch: about 0.5 s on an idle machine
        fail("second trainer took %.1f s to be refused" % took)
    if not still_running:
        fail("the first trainer ended before the second was refused (%.2f s): not a test of "
             "a directory in use" % took)
    print("second trainer refused in %.2f s: %s" % (took, lines[0]))
    out, err = first.communicate(timeout=300)
    if first.returncode != 0:
        fail("first trainer: exit %d\n%s" % (first.returncode, err[-2000:]))
    recs = records(metrics)
    steps = [r["step"] for r in recs if r.get("type") == "step"]
    if steps != list(range(1, STEPS + 1)):
        fail("first trainer's metrics: %d step records, not 1..%d once each" % (len(steps), STEPS))
    ends = [r for r in recs if r.get("type") == "end"]
    if len(ends) != 1 or ends[0].get("reason") != "done" or recs[-1].get("type") != "end":
        fail("first trainer's metrics: end records %s" % ends)
    headers = [r for r in recs if r.get("type") not in ("step", "end")]
    if sum(1 for r in recs if r.get("type") == "header") > 1:
        fail("two header records: a second writer touched the metrics file")
    ckpts = sorted(n for n in os.listdir(os.path.join(run, "checkpoints"))
                   if n.startswith("step-"))  # (anomaly-step-<N> ones are the first's too)
    if ckpts != ["step-%d" % (STEPS - 500), "step-%d" % STEPS]:
        fail("checkpoints %s, want the first's last two" % ckpts)
    print("first trainer's metrics intact: %d steps, one end record (%d other records)"
          % (len(steps), len(headers)))

    third = subprocess.run([binary, "train", "--config", config, "--run-dir", run, "--resume",
                            "latest", "--steps", str(STEPS + 20), "--json"],
                           capture_output=True, text=True, timeout=300)
    if third.returncode != 0:
        fail("resume after the first ended: exit %d\n%s" % (third.returncode, third.stderr))
    resumed = json.loads(third.stdout).get("checkpoint", {}).get("resumed_from_step")
    if resumed != STEPS:
        fail("resume: resumed_from_step %s, want %d" % (resumed, STEPS))
    print("third trainer resumed from step %d" % STEPS)


def launches(binary, config, tmp):
    d = os.path.join(tmp, "launch_same")
    r = subprocess.run([binary, "launch", "-q", "-n", "2", "--run-dir", d, "--", binary, "train",
                        "--config", config], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail("launch -n 2 --run-dir D -- train: exit %d\n%s" % (r.returncode, r.stderr))
    for rank in (0, 1):
        if not os.path.exists(os.path.join(d, "train", "metrics.rank%d.jsonl" % rank)):
            fail("launch -n 2 --run-dir D -- train: no metrics of rank %d" % rank)
    e = os.path.join(tmp, "train_dir")
    first = subprocess.Popen([binary, "launch", "-q", "-n", "2", "--run-dir",
                              os.path.join(tmp, "launch_a"), "--", binary, "train", "--config",
                              config, "--run-dir", e, "--steps", str(JOB_STEPS),
                              "--max-seconds", str(JOB_MAX_S)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_steps(os.path.join(e, "train", "metrics.rank1.jsonl"), first)
    second = subprocess.run([binary, "launch", "-q", "-n", "1", "--run-dir",
                             os.path.join(tmp, "launch_a"), "--", "true"],
                            capture_output=True, text=True, timeout=60)
    lines = check_refusal(second.returncode, second.stderr, first.pid, "second launch on D")
    if len(lines) != 1:
        fail("second launch: %d stderr lines, want 1:\n%s" % (len(lines), second.stderr))
    with open(os.path.join(e, "LOCK")) as f:
        holder = int(f.readline().split()[1])
    other = subprocess.run([binary, "launch", "-q", "-n", "2", "--run-dir",
                            os.path.join(tmp, "launch_b"), "--", binary, "train", "--config",
                            config, "--run-dir", e], capture_output=True, text=True, timeout=120)
    # The refused rank exits 2; the launch reports a failed rank (exit 1) with its line.
    check_refusal(other.returncode, other.stderr, holder, "a second job's trainers", want_rc=1)
    # Everything the first job had to outlive is done: stop it the way a user would.
    still_running = first.poll() is None
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    if not still_running or first.returncode != 128 + signal.SIGINT:
        fail("the first 2-rank job: exit %d (%s when the checks were done), want %d after "
             "SIGINT\n%s" % (first.returncode, "running" if still_running else "ended",
                             128 + signal.SIGINT, err[-2000:]))
    for rank in (0, 1):
        recs = records(os.path.join(e, "train", "metrics.rank%d.jsonl" % rank))
        steps = [x["step"] for x in recs if x.get("type") == "step"]
        if not steps or steps != list(range(1, len(steps) + 1)):
            fail("the first job's rank %d metrics: not steps 1..%d once each" % (rank, len(steps)))
        ends = [x for x in recs if x.get("type") == "end"]
        if len(ends) != 1 or recs[-1].get("type") != "end":
            fail("the first job's rank %d metrics: end records %s, not one at the end" % (rank, ends))
        if sum(1 for x in recs if x.get("type") == "header") > 1:
            fail("the first job's rank %d metrics: two header records" % rank)
    print("launch: one job is one writer; a second launch and a second job are refused")


def python_writer(binary, config, tmp, pythonpath):
    run = os.path.join(tmp, "py_run")
    env = dict(os.environ, PYTHONPATH=pythonpath)
    for k in ("TRAINSCOPE_JOB_ID", "WORLD_SIZE"):
        env.pop(k, None)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, trainscope._core as c\n"
         "l = c.lock_run_dir(sys.argv[1]); print(l.holds, flush=True); sys.stdin.read()", run],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    if holder.stdout.readline().strip() != "True":
        fail("the Python writer did not take the lock")
    r = subprocess.run([binary, "train", "--config", config, "--run-dir", run],
                       capture_output=True, text=True, timeout=60)
    check_refusal(r.returncode, r.stderr, holder.pid, "trainer beside a Python writer")
    holder.communicate("", timeout=30)
    r = subprocess.run([binary, "train", "--config", config, "--run-dir", run],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("trainer after the Python writer exited: exit %d\n%s" % (r.returncode, r.stderr))
    print("python: a _core.lock_run_dir holder refuses a trainer, and releases at exit")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--pythonpath", default="", help="build/python, for the Python writer case")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        write_config(a.config, config, every_steps=500)
        two_trainers_then_resume(a.binary, config, tmp)
        launches(a.binary, config, tmp)
        if a.pythonpath:
            python_writer(a.binary, config, tmp, a.pythonpath)
    print("PASS")


if __name__ == "__main__":
    main()
