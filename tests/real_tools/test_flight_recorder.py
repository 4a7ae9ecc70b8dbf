"""PyTorch Flight Recorder dumps written by torch 2.x itself on a real gloo hang, read by
`trainscope hang analyze` and by torch's own analyser (fr_trace), which must agree.

The job: W gloo ranks on the CPU (W processes forked from one that imported torch, as fr_trace
runs are: _fork.py; a FileStore rendezvous: no port to pick),
a broadcast and then training steps of two gradient-bucket all_reduces each. In the last
step one rank skips the second all_reduce and stalls elsewhere (as a rank stuck in its data
loader would); the others issue it and block in it (gloo timeout 60 s). Each rank has a
watchdog thread that, once every rank is at its hang point, dumps its own recorder with
torch's dump API `torch._C._distributed_c10d._dump_fr_trace_file(rank)` (pickle, to
$TORCH_FR_DUMP_TEMP_FILE<rank>, the files exactly as torch writes them) and ends the process.

Then, on the same files:
- the dumps themselves (Python's pickle) must show the hang as staged: the waiting ranks'
  last entry is gloo:all_reduce #S (S known from the program), the culprit's last is #S-1;
- `trainscope hang analyze DIR --json` must name the culprit, all_reduce and #S, the others
  as waiting, the call site in the worker;
- `python -m torch.distributed.flight_recorder.fr_trace DIR --prefix P -o DB` must name the
  same missing rank, collective, sequence id and record id, in its database and its log;
- without the culprit's dump, trainscope must say the others wait in all_reduce #S for the
  missing rank (missing_dump), and fr_trace must refuse naming the same missing rank.

torch 2.15's ProcessGroupGloo registers its group in the recorder's pg_config from its
constructor, before torch.distributed names the group: every gloo dump's pg_config is
{"": {"name": "", "desc": "", "ranks": <the last built group's group-local ranks>}} while
the entries say ("0", "default_pg"). fr_trace then stops with KeyError ('0', <rank>). When
fr_trace fails so on dumps whose pg_config is only that unnamed entry, it is run on a copy
whose pg_config is re-keyed to the group the entries name (nothing else changed), and the
test says so; trainscope must give the same verdict on the originals and on the copy. Any
other fr_trace failure fails the test.

Skipped only when this torch does not record gloo collectives: no dump API, or an empty
recorder after gloo collectives (the check then needs NCCL on a GPU machine).

Run: TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest -q tests/real_tools/test_flight_recorder.py
"""

import glob
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import torch  # noqa: F401  (the test is about this torch; a missing torch is an error)

from _cli import BINARY, gloo_fr_job  # noqa: E402
from _fork import ForkServer  # noqa: E402
PREFIX = "gloo_trace_rank_"  # TORCH_FR_DUMP_TEMP_FILE's file name part
BUCKETS = (64, 16)  # elements of the two gradient buckets, all_reduced every step
GLOO_TIMEOUT_S = 60  # how long the waiting ranks would block: far beyond the dump
READY_TIMEOUT_S = 60  # job start (imports on 2 busy cores) to every rank at its hang point
DUMP_TIMEOUT_S = 20  # trigger to every dump written and every rank gone

# One rank of the job. argv: rank world culprit last_step workdir. Marker files in workdir
# (written then renamed, so a reader never sees half a file): ready.<r> at the hang point,
# dumped.<r> after the dump, unrecorded.<r> (the reason) when this torch records no gloo
# collective, failed.<r> (a traceback) on any other error. From the test: dump.now (every
# rank is at its hang point: dump) and exit.now (every rank has dumped: end).
WORKER = textwrap.dedent("""
    import datetime, os, pickle, sys, threading, time, traceback

    rank, world, culprit, last_step = map(int, sys.argv[1:5])
    work = sys.argv[5]
    BUCKETS = %(buckets)r

    def mark(name, text=""):
        tmp = os.path.join(work, "." + name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(work, name))

    def wait_for(path, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    try:
        import torch
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d

        if not dist.is_gloo_available():
            mark(f"unrecorded.{rank}", f"torch {torch.__version__} is built without gloo")
            sys.exit(0)
        missing = [n for n in ("_dump_fr_trace", "_dump_fr_trace_file") if not hasattr(c10d, n)]
        if missing:
            mark(f"unrecorded.{rank}", f"torch {torch.__version__} has no "
                 + ", ".join("torch._C._distributed_c10d." + n for n in missing)
                 + " (no Flight Recorder dump API for gloo)")
            sys.exit(0)

        # The watchdog: once the test says every rank is at its hang point, dump this
        # rank's recorder as torch writes it; once every rank has dumped, end the process
        # (its main thread is blocked in a collective that will not finish). A rank that
        # left before the others dumped would break their gloo connections (SIGABRT).
        def watchdog():
            if not wait_for(os.path.join(work, "dump.now"), %(ready_s)d + %(dump_s)d):
                os._exit(3)
            try:
                c10d._dump_fr_trace_file(rank, includeStackTraces=True)
                mark(f"dumped.{rank}")
            except BaseException:
                mark(f"failed.{rank}", traceback.format_exc())
            wait_for(os.path.join(work, "exit.now"), %(dump_s)d)
            os._exit(0)

        dist.init_process_group(
            "gloo", init_method="file://" + os.path.join(work, "rendezvous"), rank=rank,
            world_size=world, timeout=datetime.timedelta(seconds=%(gloo_s)d))
        threading.Thread(target=watchdog, daemon=True).start()

        weights = torch.arange(8, dtype=torch.float32) if rank == 0 else torch.zeros(8)
        dist.broadcast(weights, src=0)
        if weights.tolist() != list(range(8)):
            raise AssertionError(f"broadcast gave {weights.tolist()}")
        want = float(world * (world + 1) // 2)
        for step in range(last_step + 1):
            for b, n in enumerate(BUCKETS):
                grad = torch.full((n,), float(rank + 1))
                if step == last_step and b == len(BUCKETS) - 1:
                    if rank == culprit:  # skips the collective, stalls elsewhere
                        mark(f"ready.{rank}")
                        wait_for(os.path.join(work, "dump.now"), %(ready_s)d + %(dump_s)d)
                        time.sleep(%(dump_s)d)
                        os._exit(4)  # the watchdog should have ended the process
                    handle = dist.all_reduce(grad, async_op=True)  # recorded on issue
                    mark(f"ready.{rank}")
                    handle.wait()  # blocks: the culprit never joins
                    raise AssertionError("the all_reduce the culprit skipped completed")
                dist.all_reduce(grad)
                if grad.tolist() != [want] * n:
                    raise AssertionError(f"step {step} bucket {b}: {grad.tolist()[:4]}")
            if step == 0:
                dump = pickle.loads(c10d._dump_fr_trace())
                if not [e for e in dump.get("entries", [])
                        if str(e.get("profiling_name", "")).endswith("all_reduce")]:
                    mark(f"unrecorded.{rank}", f"torch {torch.__version__}: after "
                         f"{1 + len(BUCKETS)} gloo collectives, _dump_fr_trace() holds no "
                         "all_reduce entry (TORCH_FR_BUFFER_SIZE=2000)")
                    os._exit(0)
    except SystemExit:
        raise
    except BaseException:
        mark(f"failed.{rank}", traceback.format_exc())
        os._exit(1)
""") % {"buckets": BUCKETS, "gloo_s": GLOO_TIMEOUT_S, "ready_s": READY_TIMEOUT_S,
        "dump_s": DUMP_TIMEOUT_S}


def markers(workdir, kind):
    """{rank: text} of the marker files <kind>.<rank>."""
    out = {}
    for path in glob.glob(os.path.join(workdir, kind + ".*")):
        with open(path) as f:
            out[int(path.rsplit(".", 1)[1])] = f.read()
    return out


def stop(procs):
    """Kill what is left of the job (each rank leads its own session) and reap it."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def run_hung_job(tmp, forks, world, culprit, last_step):
    """Runs the job until every rank dumped; returns the dump folder (or skips/fails)."""
    workdir, dumps, worker, env = gloo_fr_job(tmp, WORKER, PREFIX)
    procs, logs = [], []
    try:
        for r in range(world):
            log = open(os.path.join(workdir, f"log.{r}"), "w+")
            logs.append(log)
            procs.append(forks.spawn(
                [worker, str(r), str(world), str(culprit), str(last_step), workdir], env,
                workdir, log.name))

        def check_job(stage):
            failed = markers(workdir, "failed")
            if failed:
                pytest.fail(f"{stage}: rank(s) failed:\n" + "\n".join(
                    f"rank {r}:\n{t}" for r, t in sorted(failed.items())))
            unrecorded = markers(workdir, "unrecorded")
            if unrecorded:
                pytest.skip("gloo collectives are not recorded by this torch's Flight "
                            f"Recorder: {unrecorded[min(unrecorded)]}; the real-dump check "
                            "needs NCCL on a GPU machine")

        def wait_all(kind, timeout_s, stage):
            deadline = time.monotonic() + timeout_s
            while len(markers(workdir, kind)) < world:
                check_job(stage)
                dead = [r for r, p in enumerate(procs) if p.poll() is not None
                        and r not in markers(workdir, kind)]
                if dead or time.monotonic() > deadline:
                    check_job(stage)
                    tails = []
                    for r, log in enumerate(logs):
                        log.flush()
                        log.seek(0)
                        tails.append(f"rank {r} (exit {procs[r].poll()}): {log.read()[-1500:]}")
                    pytest.fail(f"{stage}: {kind} markers from {sorted(markers(workdir, kind))}"
                                f" of {world} ranks; ended early: {dead}\n" + "\n".join(tails))
                time.sleep(0.05)
            check_job(stage)

        wait_all("ready", READY_TIMEOUT_S, "reaching the hang")
        time.sleep(0.3)  # the waiters enter handle.wait(), the culprit its stall
        open(os.path.join(workdir, "dump.now"), "w").close()
        wait_all("dumped", DUMP_TIMEOUT_S, "dumping")
        open(os.path.join(workdir, "exit.now"), "w").close()
        deadline = time.monotonic() + DUMP_TIMEOUT_S
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        codes = [p.poll() for p in procs]
        assert codes == [0] * world, f"rank exit codes after the dump: {codes}"
    finally:
        stop(procs)
        for log in logs:
            log.close()
    return dumps


def load_dumps(folder):
    """{rank: dump} read with Python's pickle, the rank from torch's file name."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, PREFIX + "*"))):
        with open(path, "rb") as f:
            out[int(os.path.basename(path)[len(PREFIX):])] = pickle.load(f)
    return out


def rekeyed_copy(dumps, folder):
    """A copy of the dumps whose pg_config is keyed by the group their entries name."""
    os.makedirs(folder)
    for rank, d in dumps.items():
        (ranks,) = [c["ranks"] for c in d["pg_config"].values()]
        groups = {tuple(e["process_group"]) for e in d["entries"]}
        d = dict(d, pg_config={name: {"name": name, "desc": desc, "ranks": ranks}
                               for name, desc in groups})
        with open(os.path.join(folder, f"{PREFIX}{rank}"), "wb") as f:
            pickle.dump(d, f)


def trainscope(folder):
    p = subprocess.run([BINARY, "hang", "analyze", folder, "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1, f"hang analyze exit {p.returncode} (want 1):\n{p.stdout}{p.stderr}"
    return json.loads(p.stdout)


def fr_trace(forks, folder, db_path):
    """fr_trace on the folder: (exit code, log text, the database or None)."""
    code, log = forks.run(["-m", "torch.distributed.flight_recorder.fr_trace", folder,
                           "--prefix", PREFIX, "-o", db_path], timeout_s=90)
    db = None
    if code == 0:
        with open(db_path, "rb") as f:
            _, db = pickle.load(f)
    return code, log, db


def fr_verdict(db, log):
    """fr_trace's not-joined verdict, from its database, checked against its log."""
    bad = [c for c in db.collectives if c.missing_ranks or not c.pass_check]
    assert len(bad) == 1, f"fr_trace flagged {len(bad)} collectives: {bad}\n{log}"
    c = bad[0]
    v = {"pg": c.group_id, "seq": c.collective_seq_id, "record_id": c.record_id,
         "op": c.collective_name.split(":")[-1], "missing": sorted(c.missing_ranks or [])}
    m = re.search(r"Not all ranks joining collective, sequence number: (\d+)\s+"
                  r"internal record id: (\d+)\s+group info: (\S+)\s+collective: (\S+)\s+"
                  r"missing ranks: \{([\d, ]*)\}", log)
    assert m, f"no 'Not all ranks joining' verdict in fr_trace's log:\n{log}"
    printed = {"pg": m.group(3).split(":")[0], "seq": int(m.group(1)),
               "record_id": int(m.group(2)), "op": m.group(4).split(":")[-1],
               "missing": sorted(int(x) for x in m.group(5).split(","))}
    assert printed == v, f"fr_trace's log {printed} != its database {v}"
    return v


@pytest.fixture
def tmp():
    """A scratch folder removed afterwards, pass or fail (dumps, logs, fr_trace's db)."""
    path = tempfile.mkdtemp(prefix="ts-real-fr-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def forks():
    """The ranks' and fr_trace's processes, forked from one torch import (_fork.py)."""
    path = tempfile.mkdtemp(prefix="ts-real-fr-forks-")
    server = ForkServer(path)
    yield server
    server.close()
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("world,culprit,last_step", [(2, 1, 2), (4, 2, 1)])
def test_gloo_hang_dumps_from_torch(tmp, forks, world, culprit, last_step):
    assert os.access(BINARY, os.X_OK), f"no trainscope binary at {BINARY} (set TS_BINARY)"
    seq = 1 + last_step * len(BUCKETS) + len(BUCKETS)  # the broadcast is #1
    waiting = [r for r in range(world) if r != culprit]
    folder = run_hung_job(tmp, forks, world, culprit, last_step)

    # What torch wrote: one pickle per rank, the hang as staged.
    dumps = load_dumps(folder)
    assert sorted(dumps) == list(range(world)), os.listdir(folder)
    for rank, d in dumps.items():
        last = d["entries"][-1]
        assert last["profiling_name"] == "gloo:all_reduce", (rank, last)
        assert tuple(last["process_group"]) == ("0", "default_pg"), (rank, last)
        assert last["collective_seq_id"] == (seq - 1 if rank == culprit else seq), (rank, last)
        assert last["input_sizes"] == [[BUCKETS[-1 if rank != culprit else 0]]], (rank, last)
    record_id = dumps[waiting[0]]["entries"][-1]["record_id"]

    # trainscope on the files as torch wrote them.
    report = trainscope(folder)
    inputs = report["details"]["inputs"]
    assert inputs["dumps"] == world and not inputs["corrupt"] and not inputs["skipped"], inputs
    assert [r["format"] for r in report["details"]["ranks"]] == ["pickle"] * world
    assert len(report["findings"]) == 1, report["findings"]
    f = report["findings"][0]
    assert (f["kind"], f["pg"], f["pg_desc"], f["op"], f["collective_seq_id"]) == (
        "not_joined", "0", "default_pg", "all_reduce", seq), f
    assert (f["culprit_ranks"], f["waiting_ranks"]) == ([culprit], waiting), f
    assert "worker.py" in f["caller"], f  # the call site, from torch's frames
    assert f"rank {culprit} never joined all_reduce #{seq} of group 0" in f["sentence"], f

    # torch's analyser on the same files.
    fr_folder = folder
    code, log, db = fr_trace(forks, folder, os.path.join(tmp, "fr_db.pkl"))
    if code != 0:
        unnamed = all(set(d["pg_config"]) == {""} for d in dumps.values())
        assert unnamed and "KeyError: ('0'," in log, f"fr_trace failed (exit {code}):\n{log}"
        print(f"torch {torch.__version__}: fr_trace cannot read gloo dumps as written (pg_config "
              "keyed '' by ProcessGroupGloo's constructor, KeyError ('0', rank)); comparing on "
              "a copy with pg_config re-keyed to the entries' group")
        fr_folder = os.path.join(tmp, "dumps_rekeyed")
        rekeyed_copy(dumps, fr_folder)
        code, log, db = fr_trace(forks, fr_folder, os.path.join(tmp, "fr_db.pkl"))
        assert code == 0, f"fr_trace on the re-keyed copy failed (exit {code}):\n{log}"
        again = trainscope(fr_folder)
        assert again["findings"] == report["findings"], (again["findings"], report["findings"])
    fr = fr_verdict(db, log)

    # Both must name the same rank, collective, sequence id and record.
    ours = {"pg": f["pg"], "seq": f["collective_seq_id"], "record_id": record_id,
            "op": f["op"], "missing": f["culprit_ranks"]}
    assert fr == ours, f"fr_trace {fr} != trainscope {ours}"

    # The culprit's dump lost (as if it had crashed): the others still wait in #S, and the
    # group still has every rank (gloo's dumps name none in pg_config). fr_trace refuses.
    for src, name in ((folder, "partial"), (fr_folder, "fr_partial")):
        os.makedirs(os.path.join(tmp, name), exist_ok=True)
        for r in waiting:
            shutil.copy(os.path.join(src, f"{PREFIX}{r}"), os.path.join(tmp, name))
    partial = trainscope(os.path.join(tmp, "partial"))
    groups = [(g["pg"], g["ranks"], g["missing_ranks"]) for g in partial["details"]["groups"]]
    assert groups == [("0", list(range(world)), [culprit])], groups
    m = partial["findings"][0]
    assert (m["kind"], m["op"], m["collective_seq_id"], m["culprit_ranks"], m["waiting_ranks"]) \
        == ("missing_dump", "all_reduce", seq, [culprit], waiting), m
    code, log, _ = fr_trace(forks, os.path.join(tmp, "fr_partial"), os.path.join(tmp, "fr_db2.pkl"))
    assert code != 0 and f"Missing dump files from ranks {{{culprit}}}" in log, (code, log)
