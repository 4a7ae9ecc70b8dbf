#!/usr/bin/python3
"""`trainscope hang analyze` on real multi-group hangs: the root ranks across process groups
(issue 31 part 1), on Flight Recorder dumps written by the venv's torch itself.

The job: 8 gloo ranks on the CPU (8 processes forked from one that imported torch once for
the whole test, real_tools/_fork.py; a FileStore rendezvous), laid out as
rank = 4 dp + 2 pp + tp: tensor parallel pairs [0,1] [2,3] [4,5] [6,7], pipeline pairs
[0,2] [1,3] [4,6] [5,7], data parallel pairs [0,4] [1,5] [2,6] [3,7], and two expert groups
[0..3] [4..7], every one a `new_group`. Each step: the expert group's all_to_all_single with
unequal splits (the per-rank sizes differ legitimately), the tensor group's all_reduce, the
pipeline's forward and backward transfers, the data group's all_reduce. torch's gloo Flight
Recorder records no point-to-point op, so the pipeline transfer is a broadcast in the stage
pair's group (as DeepSpeed's pipeline engine sends between stages), which it does record.

In the last step one or two ranks stop (a scenario below); the others go as far as they can
and block. Once every rank reached the last step and the job had time to settle, each rank's
watchdog thread dumps its recorder with torch's API (`_dump_fr_trace_file`, pickle, files as
torch writes them); a watchdog that hears nothing dumps by itself after WATCHDOG_S. Then
`trainscope hang analyze DIR --json` must give the scenario's root_ranks, a first finding that
blames only those ranks, no size_mismatch (the all_to_all sizes differ on purpose), and the
same roots once the culprits' own dumps are deleted ("missing" variant).

Run: .venv/bin/python tests/hang_multigroup_test.py --binary build/bin/trainscope [--keep DIR]
Exit 0 when every scenario passed, 1 on a wrong verdict, 77 when this torch records no gloo
collectives (no dump API).
"""

import argparse, glob, json, os, shutil, signal, subprocess, sys, tempfile, textwrap, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_tools"))
from _cli import gloo_fr_job  # noqa: E402  (the FR job set-up shared with real_tools)
from _fork import ForkServer  # noqa: E402  (48 torch imports were most of the test's time)

WORLD = 8
PREFIX = "gloo_trace_rank_"
STEPS = 2            # the hang is in the last one
SETTLE_S = 1.0       # every rank in its last step -> dump: the time to reach the blocking op
                     # (about 20 ms on an idle machine; it was 2 s)
START_TIMEOUT_S = 90  # a torch import (the first job) + 8 ranks and 14 groups on 2 busy cores
WATCHDOG_S = 120     # a rank dumps by itself when no trigger came (the driver died)
DUMP_TIMEOUT_S = 30

# scenario -> (what the culprits do, expected root ranks, culprits whose dumps exist)
# action: "skip:<op>" leaves that collective out and goes on; "sleep:<op>" / "lock:<op>"
# stops in Python right before it (a sleep, a lock its loader thread holds); "exit:<op>"
# ends the process there (os._exit), "kill:<op>" SIGKILLs itself there: no dump.
SCENARIOS = {
    "not_joined": ({5: "skip:tp"}, [5], [5]),
    "two_groups": ({1: "sleep:tp", 6: "lock:ep"}, [1, 6], [1, 6]),
    "pipeline_peer_gone": ({6: "exit:pp_bwd"}, [6], []),
    "expert_all_to_all": ({6: "sleep:ep"}, [6], [6]),
    "rank_died": ({3: "kill:tp"}, [3], []),
    "healthy": ({}, [], []),
}

WORKER = textwrap.dedent("""
    import datetime, json, os, signal, sys, threading, time, traceback
    rank, world, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    work, actions = sys.argv[4], json.loads(sys.argv[5])
    action = actions.get(str(rank), "")
    kind, _, where = action.partition(":")

    def mark(name, text=""):
        tmp = os.path.join(work, "." + name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(work, name))

    def wait_for(name, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(os.path.join(work, name)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    try:
        import torch
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d
        if not hasattr(c10d, "_dump_fr_trace_file"):
            mark(f"unrecorded.{rank}", f"torch {torch.__version__}: no _dump_fr_trace_file")
            sys.exit(0)

        def watchdog():
            wait_for("dump.now", %(watchdog_s)d)
            try:
                c10d._dump_fr_trace_file(rank, includeStackTraces=False)
                mark(f"dumped.{rank}")
            except BaseException:
                mark(f"failed.{rank}", traceback.format_exc())
            wait_for("exit.now", %(dump_s)d)
            os._exit(0)

        dist.init_process_group(
            "gloo", init_method="file://" + os.path.join(work, "rendezvous"), rank=rank,
            world_size=world, timeout=datetime.timedelta(seconds=%(watchdog_s)d))
        threading.Thread(target=watchdog, daemon=True).start()
        dp, pp, tp = rank // 4, (rank // 2) %% 2, rank %% 2
        groups = {}
        for name, lists in (("tp", [[2 * i, 2 * i + 1] for i in range(4)]),
                            ("pp", [[4 * d + t, 4 * d + 2 + t] for d in range(2) for t in range(2)]),
                            ("dp", [[i, i + 4] for i in range(4)]),
                            ("ep", [[0, 1, 2, 3], [4, 5, 6, 7]])):
            for ranks in lists:  # every rank builds every group, in the same order
                g = dist.new_group(ranks)
                if rank in ranks:
                    groups[name] = (g, ranks)
        loader_lock = threading.Lock()

        def stop_here(op):
            if where != op or step != steps - 1:
                return False
            if kind == "skip":
                return True
            mark(f"stalled.{rank}")
            if kind == "exit":
                os._exit(0)
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "lock":  # a loader thread holds the lock the step needs
                threading.Thread(target=loader_lock.acquire, daemon=True).start()
                time.sleep(0.2)
                loader_lock.acquire()
            time.sleep(%(watchdog_s)d + %(dump_s)d)  # "sleep", and what is left of "lock"
            return True

        def splits(r):  # rank r's input split to each member of its expert group
            return [1 + (r + j) %% 3 for j in range(4)]

        for step in range(steps):
            if step == steps - 1:
                mark(f"last.{rank}")
            g, members = groups["ep"]
            if not stop_here("ep"):
                inp = torch.full((sum(splits(rank)),), float(rank))
                out_splits = [splits(p)[members.index(rank)] for p in members]
                out = torch.empty(sum(out_splits))
                dist.all_to_all_single(out, inp, out_splits, splits(rank), group=g)
                want = [float(p) for p, n in zip(members, out_splits) for _ in range(n)]
                assert out.tolist() == want, (step, out.tolist(), want)
            g, members = groups["tp"]
            if not stop_here("tp"):
                x = torch.ones(8)
                dist.all_reduce(x, group=g)
            g, members = groups["pp"]
            for op, src in (("pp_fwd", members[0]), ("pp_bwd", members[1])):
                if not stop_here(op):
                    dist.broadcast(torch.ones(16) if rank == src else torch.zeros(16), src=src,
                                   group=g)
            g, members = groups["dp"]
            if not stop_here("dp"):
                dist.all_reduce(torch.ones(32), group=g)
        mark(f"finished.{rank}")
        time.sleep(%(watchdog_s)d + %(dump_s)d)  # the watchdog ends the process
    except SystemExit:
        raise
    except BaseException:
        mark(f"error.{rank}", traceback.format_exc())  # a peer gone: wait to be dumped
        time.sleep(%(watchdog_s)d + %(dump_s)d)
""") % {"watchdog_s": WATCHDOG_S, "dump_s": DUMP_TIMEOUT_S}


def markers(work, kind):
    return {int(p.rsplit(".", 1)[1]): open(p).read()
            for p in glob.glob(os.path.join(work, kind + ".*"))}


def run_job(tmp, forks, name, actions):
    """Runs one scenario's job until every live rank dumped; returns the dump folder."""
    work, dumps, worker, env = gloo_fr_job(tmp, WORKER, PREFIX, job=os.path.join(name, "job"),
                                           dumps=os.path.join(name, "dumps"))
    arg = json.dumps({str(r): a for r, a in actions.items()})
    procs = []
    try:
        for r in range(WORLD):
            procs.append(forks.spawn([worker, str(r), str(WORLD), str(STEPS), work, arg], env,
                                     work, os.path.join(work, f"log.{r}")))

        def fail(stage):
            tails = "\n".join(f"rank {r} (exit {p.poll()}): "
                              + open(os.path.join(work, f"log.{r}")).read()[-1200:]
                              for r, p in enumerate(procs))
            raise AssertionError(f"{name}: {stage}\n{tails}")

        deadline = time.monotonic() + START_TIMEOUT_S
        while len(markers(work, "last")) < WORLD:
            if markers(work, "unrecorded"):
                raise SystemExit(77)
            if markers(work, "failed") or time.monotonic() > deadline:
                fail("not every rank reached the last step")
            time.sleep(0.05)
        time.sleep(SETTLE_S)
        open(os.path.join(work, "dump.now"), "w").close()
        alive = [r for r, p in enumerate(procs) if p.poll() is None]
        deadline = time.monotonic() + DUMP_TIMEOUT_S
        while not set(alive) <= set(markers(work, "dumped")):
            if markers(work, "failed") or time.monotonic() > deadline:
                fail(f"dumps from {sorted(markers(work, 'dumped'))} of {alive}")
            time.sleep(0.05)
        open(os.path.join(work, "exit.now"), "w").close()
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    p.wait(timeout=DUMP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    return dumps, sorted(markers(work, "error"))


def analyze(binary, folder):
    p = subprocess.run([binary, "hang", "analyze", folder, "--json"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode not in (0, 1):
        raise AssertionError(f"hang analyze {folder}: exit {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


def check(name, variant, report, roots):
    """The verdict's roots, its first finding, no all_to_all size mismatch."""
    where = f"{name} ({variant})"
    got = report["root_ranks"]
    findings = report["findings"]
    summary = "\n".join(f"  {f['kind']} pg {f['pg']} culprits {f['culprit_ranks']} waiting "
                        f"{f['waiting_ranks']}: {f['sentence']}" for f in findings)
    assert got == roots, f"{where}: root_ranks {got}, want {roots}\n{summary}"
    assert not [f for f in findings if f["kind"] == "size_mismatch"], f"{where}: {summary}"
    if not roots:
        assert not report["problem"] and not findings and report["root_cause"] == "", where
        return
    first = findings[0]
    assert first["root"] and first["culprit_ranks"] and set(first["culprit_ranks"]) <= set(roots), \
        f"{where}: first finding blames {first['culprit_ranks']}\n{summary}"
    assert report["root_cause"].startswith("Root cause: rank"), (where, report["root_cause"])
    for f in findings[1:]:  # every other finding is a consequence of the roots, or a root too
        assert f["root"] or set(f["consequence_of"]) <= set(roots), (where, f)
    named = {r for f in findings if f["root"] for r in f["culprit_ranks"]}
    assert named == set(roots), f"{where}: root findings name {sorted(named)}\n{summary}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--keep", help="leave the dumps in this folder")
    ap.add_argument("--only", help="run this scenario alone")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="ts-hang-mg-")
    if args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    failures, checked = [], 0
    forks = ForkServer(tmp)
    try:
        for name, (actions, roots, present) in SCENARIOS.items():
            if args.only and name != args.only:
                continue
            t0 = time.monotonic()
            dumps, errored = run_job(tmp, forks, name, actions)
            have = sorted(int(p.rsplit("_", 1)[1]) for p in glob.glob(os.path.join(dumps, PREFIX + "*")))
            gone = sorted(set(actions) - set(present))
            assert have == sorted(set(range(WORLD)) - set(gone)), (name, have)
            variants = [("dumps present" if present else "culprits left no dump", dumps)]
            if present:  # the same hang without the culprits' own dumps
                missing = os.path.join(tmp, name, "missing")
                os.makedirs(missing)
                for p in glob.glob(os.path.join(dumps, PREFIX + "*")):
                    if int(p.rsplit("_", 1)[1]) not in present:
                        shutil.copy(p, missing)
                variants.append(("culprits' dumps deleted", missing))
            for variant, folder in variants:
                try:
                    check(name, variant, analyze(args.binary, folder), roots)
                    checked += 1
                    print(f"ok   {name} ({variant}): root_ranks {roots}")
                except AssertionError as e:
                    failures.append(str(e))
                    print(f"FAIL {e}")
            print(f"     {name}: {time.monotonic() - t0:.1f} s, ranks with a peer error: {errored}")
    finally:
        forks.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checked} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
