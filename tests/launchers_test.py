#!/usr/bin/python3
"""The same job under other launchers: torchrun and Slurm's srun start trainscope's ranks
with their own variables (comm/join.h), and the results must equal those of the same command
under `trainscope launch -n 2`.

  - `selftest comm --json`: passed, backend, world size, and every row's op, size, dtype and
    correctness (the timings differ from run to run);
  - `data scan --distributed --json` on a corpus from tests/data: the whole report but
    wall_s, and the --verdicts file byte for byte; equal to the single-process scan too;
  - `train` (when trainscope-torch is built; --no-train skips it) on tests/data/train/
    dp_tiny.json: every step's loss on both ranks, and the data order hash.
The first two also run under mpirun (Open MPI, gloo backend) when it is installed.

torchrun is the venv's (`--no-python`, a free --master-port): its elastic agent's TCPStore
already listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), which the ranks join
through. Slurm is simulated: two processes with SLURM_PROCID=0/1, SLURM_NTASKS=2,
SLURM_LOCALID, SLURM_STEP_ID, SLURM_STEP_NODELIST=localhost and SLURM_JOB_ID (the port is
derived from the job id, as on a cluster without MASTER_PORT). Every run is bounded (a
process group killed at its timeout). Exit 0 when all match; else prints each difference
and exits 1.
"""
import argparse, json, os, signal, socket, subprocess, sys, tempfile, time, shutil

# Variables of any launcher that may surround this test (it may itself run under one).
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "TORCHELASTIC_",
                     "GROUP_", "ROLE_")
LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "TRAINSCOPE_JOB_TOKEN", "TRAINSCOPE_RUN_DIR"}


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)}
    env["TRAINSCOPE_NO_PROGRESS"] = "1"
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_all(cmds, timeout):
    """Starts every (argv, env) at once; returns [(rc, stdout, stderr)]. Each runs in its own
    process group, killed (with whatever it started) when the timeout passes."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) for argv, env in cmds]
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            out.append((p.returncode, o, e))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            o, e = p.communicate()
            out.append((None, o, e + "\n[killed after %d s]" % timeout))
    for p in procs:  # leftovers of a finished rank's group
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return out


class Runner:
    def __init__(self, binary, torchrun, tmp, timeout):
        self.binary, self.torchrun, self.tmp, self.timeout = binary, torchrun, tmp, timeout
        self.failures = []

    def check(self, what, results, ok_codes=(0,)):
        for i, (rc, o, e) in enumerate(results):
            if rc not in ok_codes:
                self.failures.append("%s: process %d exit %s\n  stdout: %s\n  stderr: %s" %
                                     (what, i, rc, o[-1500:], e[-2500:]))
                return False
        return True

    def launch(self, tag, args, ok_codes=(0,)):
        """`trainscope launch -n 2 -- trainscope ARGS`: rank 0's stdout."""
        d = os.path.join(self.tmp, "launch-" + tag)
        r = run_all([([self.binary, "launch", "-n", "2", "-q", "--run-dir", d, "--",
                       self.binary] + args, clean_env())], self.timeout)
        if not self.check("launch " + tag, r, ok_codes):
            return None
        with open(os.path.join(d, "rank0", "stdout.log")) as f:
            return f.read()

    def torchrun_job(self, tag, args, ok_codes=(0,)):
        """torchrun --nproc-per-node 2 trainscope ARGS: its stdout (only rank 0 prints)."""
        argv = [self.torchrun, "--no-python", "--nproc-per-node", "2", "--master-port",
                str(free_port()), self.binary] + args
        r = run_all([(argv, clean_env(OMP_NUM_THREADS="1"))], self.timeout)
        return r[0][1] if self.check("torchrun " + tag, r, ok_codes) else None

    def mpirun_job(self, tag, args, ok_codes=(0,)):
        """mpirun -np 2 trainscope ARGS (gloo, meeting at a port derived from Open MPI's job
        id): its stdout, where only rank 0 prints. None (not run) without mpirun."""
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            return None
        argv = [mpirun, "-np", "2", "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        r = run_all([(argv + [self.binary] + args, clean_env(OMP_NUM_THREADS="1"))], self.timeout)
        return r[0][1] if self.check("mpirun " + tag, r, ok_codes) else None

    def slurm_job(self, tag, args, ok_codes=(0,)):
        """Two processes with srun's variables: rank 0's stdout."""
        job = str(4000 + os.getpid() % 50000)  # a job id of our own: its own derived port
        cmds = []
        for r in range(2):
            env = clean_env(SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_LOCALID=str(r),
                            SLURM_NODEID="0", SLURM_STEP_ID="0", SLURM_JOB_ID=job,
                            SLURM_STEP_NODELIST="localhost", SLURM_STEP_TASKS_PER_NODE="2",
                            OMP_NUM_THREADS="1")
            cmds.append(([self.binary] + args, env))
        r = run_all(cmds, self.timeout)
        return r[0][1] if self.check("slurm " + tag, r, ok_codes) else None


def comm_summary(text):
    j = json.loads(text)
    rows = [(r["op"], r["bytes"], r["count"], r["dtype"], r["correct"], r["wrong"],
             r.get("wrong_by_dtype")) for r in j["results"]]
    return {"passed": j["passed"], "backend": j["backend"], "world_size": j["world_size"],
            "ops": j["ops"], "check_dtypes": j["check_dtypes"], "rows": rows}


def scan_summary(text):
    j = json.loads(text)
    j.pop("wall_s", None)
    return j


def first_difference(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return "%s.%s: present on one side only" % (path, k)
            d = first_difference(a[k], b[k], path + "." + k)
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return "%s: %d vs %d entries" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: %r vs %r" % (path, a, b)


def compare(t, what, reference, others, summarize):
    if reference is None:
        return
    ref = summarize(reference)
    for name, text in others:
        if text is None:
            continue
        try:
            got = summarize(text)
        except (ValueError, KeyError) as e:
            t.failures.append("%s under %s: unreadable report (%s): %r" % (what, name, e, text[:300]))
            continue
        d = first_difference(ref, got)
        if d:
            t.failures.append("%s under %s differs from trainscope launch: %s" % (what, name, d))
        else:
            print("%s under %s: same as under trainscope launch" % (what, name))


def test_comm(t):
    # The slow-rank probe judges the machine's load, not the launcher: off.
    args = ["selftest", "comm", "--json", "--sizes", "1K,64K", "--iters", "2", "--warmup", "1",
            "--seconds-per-size", "0.2", "--slow-rank-ratio", "0"]
    ref = t.launch("comm", args)
    compare(t, "selftest comm", ref, [("torchrun", t.torchrun_job("comm", args)),
                                      ("slurm", t.slurm_job("comm", args)),
                                      ("mpirun", t.mpirun_job("comm", args))], comm_summary)
    if ref is not None and not json.loads(ref)["passed"]:
        t.failures.append("selftest comm did not pass under trainscope launch")


def test_scan(t, source_dir):
    inputs = [os.path.join(source_dir, "tests", "data", p) for p in
              ("data/small.jsonl", "train/tiny.jsonl", "train/tiny.txt")]
    base = ["data", "scan"] + inputs + ["--json", "--fail-on", "none", "--threads", "1"]
    single = run_all([([t.binary] + base, clean_env())], t.timeout)
    if not t.check("single-process scan", single):
        return
    reports, verdicts = [], {}
    for name, fn in (("launch", t.launch), ("torchrun", t.torchrun_job), ("slurm", t.slurm_job),
                     ("mpirun", t.mpirun_job)):
        v = os.path.join(t.tmp, name + ".verdicts.jsonl")
        reports.append((name, fn("scan", base + ["--distributed", "--verdicts", v])))
        verdicts[name] = open(v, "rb").read() if os.path.exists(v) else None
    compare(t, "data scan --distributed", reports[0][1], reports[1:], scan_summary)
    for name in ("torchrun", "slurm", "mpirun"):
        if name == "mpirun" and shutil.which("mpirun") is None:
            continue
        if verdicts[name] != verdicts["launch"]:
            t.failures.append("data scan --verdicts under %s differ from trainscope launch" % name)
    if reports[0][1] is not None:
        dist = scan_summary(reports[0][1])
        dist.pop("distributed", None)
        d = first_difference(scan_summary(single[0][1]), dist)
        if d:
            t.failures.append("data scan --distributed differs from the single-process scan: " + d)


def train_summary(run_dir):
    out = {}
    for r in range(2):
        path = os.path.join(run_dir, "train", "metrics.rank%d.jsonl" % r)
        recs = [json.loads(l) for l in open(path) if l.strip()]
        out["rank%d_losses" % r] = [x["loss"] for x in recs if x.get("type") == "step"]
        out["rank%d_data_order_hash" % r] = [x.get("data_order_hash") for x in recs
                                             if "data_order_hash" in x]
    return out


def test_train(t, source_dir):
    cfg_src = os.path.join(source_dir, "tests", "data", "train", "dp_tiny.json")
    cfg = json.load(open(cfg_src))
    base = os.path.dirname(cfg_src)
    cfg["data"]["corpus"] = [os.path.join(base, p) for p in cfg["data"]["corpus"]]
    path = os.path.join(t.tmp, "dp_tiny.json")
    json.dump(cfg, open(path, "w"))
    dirs = {n: os.path.join(t.tmp, "train-" + n) for n in ("torchrun", "slurm")}
    ref_dir = os.path.join(t.tmp, "launch-train")
    if t.launch("train", ["train", "--config", path]) is None:
        return
    ran = [(n, fn("train", ["train", "--config", path, "--run-dir", dirs[n]]))
           for n, fn in (("torchrun", t.torchrun_job), ("slurm", t.slurm_job))]
    ref = train_summary(ref_dir)
    if len(ref["rank0_losses"]) != cfg["train"]["steps"]:
        t.failures.append("train under launch: %d steps logged" % len(ref["rank0_losses"]))
    for name, out in ran:
        if out is None:
            continue
        d = first_difference(ref, train_summary(dirs[name]))
        if d:
            t.failures.append("train under %s differs from trainscope launch: %s" % (name, d))
        else:
            print("train under %s: the same losses on both ranks as under trainscope launch" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True, help="build/bin/trainscope")
    ap.add_argument("--torchrun", default=None, help="default: torchrun next to this Python")
    ap.add_argument("--no-train", action="store_true", help="skip the trainer (no libtorch)")
    ap.add_argument("--timeout", type=float, default=40, help="seconds per job")
    a = ap.parse_args()
    source_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    torchrun = a.torchrun or os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        print("skipped: no torchrun at %s (the venv's torch)" % torchrun)
        return 77
    binary = os.path.abspath(a.binary)
    tmp = tempfile.mkdtemp(prefix="ts_launchers_")
    t = Runner(binary, torchrun, tmp, a.timeout)
    start = time.monotonic()
    try:
        test_comm(t)
        test_scan(t, source_dir)
        has_torch = os.path.exists(os.path.join(os.path.dirname(binary), "trainscope-torch"))
        if not a.no_train and has_torch:
            test_train(t, source_dir)
    finally:
        if not t.failures:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%.1f s" % (time.monotonic() - start))
    for f in t.failures:
        print("FAIL: " + f)
    if t.failures:
        print("logs kept in " + tmp)
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
