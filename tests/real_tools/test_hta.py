"""`trainscope trace analyze` against HolisticTraceAnalysis on traces made by torch 2.x's profiler.

Two CPU processes train a small model with a DataLoader under DDP over gloo, profiled by
torch.profiler with schedule(wait=1, warmup=1, active=3, repeat=2) and tensorboard_trace_handler:
two profiler windows, so two files per rank. Both tools then read the same files:

- Reader: the folder is 2 ranks of 2 windows each (both files of a process are one rank, its
  steps and breakdown over both), rank from distributedInfo, no bad record of any kind, and the
  steps HTA finds.
- CPU traces as written: HTA (0.5.0) gives no temporal breakdown, idle time or overlap for a
  trace without device events (IndexError, ValueError, NaN: test_hta_on_cpu_traces records
  which and compares any figure it does give). trainscope's host basis is checked against HTA's
  own parse of the same files (its ns rounding and last-step filter): step times exactly, and
  compute / non-compute / idle % and the comm/comp overlap recomputed from HTA's events with
  the definitions of docs/metrics.md "Trace breakdown", basis host.
- Device view of the same traces: each trace with its host work mirrored onto device
  streams the way Kineto writes CUDA work (a cudaLaunchKernel on the host thread, a kernel
  with the same correlation id on a stream, at the host event's times): the main thread's
  first-level step children on stream 7 (the DDP bucket copies as Memcpy), each gloo collective
  as a nccl kernel on a stream per gloo thread. On these files HTA's get_temporal_breakdown,
  get_comm_comp_overlap and (compute stream alone) get_idle_time_breakdown run, and
  trainscope's device basis must give the same idle / compute / non-compute %, idle time and
  overlap to 0.15 points.

Every comparison is between two tools on the same files, never against a time. Needs torch
and HolisticTraceAnalysis (skipped without them) and the binary ($TS_BINARY, else
build/bin/trainscope). Run: TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest -q
tests/real_tools/test_hta.py
"""
import datetime
import glob
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _cli import BINARY  # noqa: E402
TOL_POINTS = 0.15  # the tolerance, in percentage points
WORLD = 2
STEPS = 10  # two windows of wait 1 + warmup 1 + active 3
COMPUTE_STREAM, COMM_STREAM0 = 7, 20
# HTA 0.5.0 under pandas 3 warns of deprecated pandas calls at every step: not ours to see.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:hta.*")

# --- making the traces (this file run as a script: --make-traces DIR) ---


def _train_rank(rank, port, out_dir):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    from torch.profiler import tensorboard_trace_handler

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    ds = torch.utils.data.TensorDataset(torch.randn(512, 64, generator=g),
                                        torch.randint(0, 10, (512,), generator=g))
    dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=1)
    sched = schedule(wait=1, warmup=1, active=3, repeat=2)
    handler = tensorboard_trace_handler(out_dir, worker_name="rank%d" % rank)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=handler) as p:
        for i, (x, y) in enumerate(dl):
            if i == STEPS:
                break
            with record_function("## forward"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            p.step()
    dist.destroy_process_group()


def make_traces(out_dir):
    import torch.multiprocessing as mp

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(_train_rank, args=(port, out_dir), nprocs=WORLD)


# --- helpers ---


def run_trainscope(path):
    p = subprocess.run([BINARY, "trace", "analyze", path, "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode in (0, 1), "trainscope exit %d: %s" % (p.returncode, p.stderr[-2000:])
    return json.loads(p.stdout)


def load_hta(trace_dir):
    from hta.trace_analysis import TraceAnalysis

    return TraceAnalysis(trace_dir=trace_dir)


def by_rank(doc):
    return {r["rank"]: r for r in doc["ranks"]}


def points(part_us, whole_us):
    return 100.0 * part_us / whole_us


def nesting_children(rows, parent):
    """trainscope's nesting (src/trace/analysis.cc PrepareHost) on one thread's rows, each
    (ts, end, index): sorted by (ts, -dur); an event's parent is the innermost open event
    that contains it; partial overlaps are siblings. Returns the direct children of `parent`."""
    out, stack = [], []
    for r in sorted(rows, key=lambda r: (r[0], -(r[1] - r[0]), r[2])):
        while stack and (stack[-1][1] <= r[0] or stack[-1][1] < r[1]):
            stack.pop()
        if stack and stack[-1][2] == parent:
            out.append(r)
        stack.append(r)
    return out


def union(iv):
    out = []
    for a, b in sorted(iv):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(m):
    return sum(b - a for a, b in m)


def intersect(m1, m2):
    i = j = s = 0
    while i < len(m1) and j < len(m2):
        lo, hi = max(m1[i][0], m2[j][0]), min(m1[i][1], m2[j][1])
        s += max(0, hi - lo)
        if m1[i][1] < m2[j][1]:
            i += 1
        else:
            j += 1
    return s


def phase_of_name(name):
    """docs/metrics.md "Host breakdown of a step": the phase a name says."""
    low = name.lower()
    if any(k in low for k in ("dataloader", "data_loader", "data_wait")):
        return "data_loading"
    if name.startswith("Optimizer.") or "optimizer" in low:
        return "optimizer"
    if low.startswith(("gloo:", "nccl:", "c10d::", "hccl", "hcom", "record_param_comms")) or any(
            k in low for k in ("allreduce", "all_reduce", "allgather", "all_gather",
                               "reduce_scatter", "reducescatter", "alltoall", "broadcast",
                               "ddp.reducer", "barrier")):
        return "communication"
    if "backward" in low or low.startswith("autograd::engine"):
        return "backward"
    if ".forward" in low or "## forward" in low or low.startswith("nn.module"):
        return "forward"
    return "other"


def host_basis_from_hta(t, rank):
    """The host-basis temporal breakdown and overlap of docs/metrics.md computed from HTA's
    parse of the trace (HTA's ns rounding, last-step filter and event table)."""
    df = t.t.get_trace(rank)
    sym = t.t.symbol_table.get_sym_table()
    df = df[df["dur"].notna() & df["stream"].eq(-1)]
    names = [sym[n] for n in df["name"]]
    rows = list(zip(df["ts"].astype(int), (df["ts"] + df["dur"]).astype(int), df["tid"],
                    df["pid"], names, range(len(df))))
    steps = [r for r in rows if r[4].startswith("ProfilerStep#")]
    main = max({(r[3], r[2]) for r in steps}, key=lambda k: sum((s[3], s[2]) == k for s in steps))
    steps = sorted((s for s in steps if (s[3], s[2]) == main), key=lambda s: s[0])
    main_rows = [(r[0], r[1], r[5], r[4]) for r in rows if (r[3], r[2]) == main]
    host_comm = union([[r[0], r[1]] for r in rows if phase_of_name(r[4]) == "communication"])
    total = compute = comm = 0
    main_compute = []
    per_step = []
    for s in steps:
        kids = nesting_children([(r[0], r[1], r[2]) for r in main_rows], s[5])
        name_of = {r[2]: r[3] for r in main_rows}
        seen_bwd = opt_after_bwd = False
        ph_us = {}
        for a, b, i in kids:
            p = phase_of_name(name_of[i])
            if p == "backward":
                seen_bwd = True
            if p == "optimizer" and seen_bwd:
                opt_after_bwd = True
            if p in ("forward", "backward", "optimizer"):
                main_compute.append([a, b])
            if p == "other":
                p = "forward" if not seen_bwd else ("other" if opt_after_bwd else "backward")
            ph_us[p] = ph_us.get(p, 0) + (b - a)
        gaps_busy = union([[a, b] for a, b, _ in kids])
        gaps = []
        cur = s[0]
        for a, b in gaps_busy:
            if a > cur:
                gaps.append([cur, min(a, s[1])])
            cur = max(cur, b)
        if cur < s[1]:
            gaps.append([cur, s[1]])
        wait = intersect(union(gaps), host_comm)
        step_us = s[1] - s[0]
        c = ph_us.get("forward", 0) + ph_us.get("backward", 0) + ph_us.get("optimizer", 0)
        total += step_us
        compute += c
        comm += ph_us.get("communication", 0) + wait
        per_step.append(step_us)
    compute = min(compute, total)
    non_compute = min(comm, total - compute)
    idle = max(0, total - compute - non_compute)
    overlap = (100.0 * intersect(host_comm, union(main_compute)) / length(host_comm)
               if host_comm else None)
    return {"kernel_time_us": total, "compute_us": compute, "non_compute_us": non_compute,
            "idle_us": idle, "overlap_pct": overlap, "steps": per_step}


# --- the device view ---


def first_level_children(events, steps):
    """The events directly inside each step on the step's thread (raw times)."""
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        inside = sorted((e for e in events if e is not s and (e["pid"], e["tid"]) ==
                         (s["pid"], s["tid"]) and e["ts"] >= lo and e["ts"] + e["dur"] <= hi),
                        key=lambda e: (e["ts"], -e["dur"]))
        end = lo
        for e in inside:
            if e["ts"] >= end:
                out.append(e)
                end = e["ts"] + e["dur"]
    return out


def write_device_view(src, dst, with_comm=True):
    """`src` with its host work mirrored onto device streams, as Kineto records CUDA work:
    for each mirrored host event a cudaLaunchKernel (cuda_runtime) on its thread and a kernel
    on a stream with the same correlation id and the host event's ts and dur. Returns the
    number of kernels written per stream."""
    with open(src) as fh:
        doc = json.load(fh)
    ev = doc["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    steps = [e for e in xs if e["name"].startswith("ProfilerStep#")]
    mirrored = [(e, "compute") for e in first_level_children(xs, steps)]
    comm = [e for e in xs if e["name"].startswith("gloo:")]
    comm_threads = sorted({e["tid"] for e in comm})
    if with_comm:
        mirrored += [(e, "comm") for e in comm]
    added, per_stream = [], {}
    corr = 1 << 20  # Kineto-sized ids
    for e, kind in mirrored:
        if kind == "comm":
            name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
            stream = COMM_STREAM0 + comm_threads.index(e["tid"])
        elif "copy_bucket_to_grad" in e["name"]:
            name, stream = "Memcpy DtoD (Device -> Device)", COMPUTE_STREAM
        else:
            name, stream = e["name"], COMPUTE_STREAM
        added.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                      "pid": e["pid"], "tid": e["tid"], "ts": e["ts"], "dur": 0,
                      "args": {"correlation": corr}})
        added.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                      "ts": e["ts"], "dur": e["dur"],
                      "args": {"device": 0, "stream": stream, "correlation": corr}})
        per_stream[stream] = per_stream.get(stream, 0) + 1
        corr += 1
    doc["traceEvents"] = sorted(ev + added, key=lambda e: e.get("ts", -math.inf))
    with open(dst, "w") as fh:
        json.dump(doc, fh)
    return per_stream


# --- fixtures ---


@pytest.fixture(scope="module")
def traces():
    """{"all": dir of the 4 files, "windows": [dir per window with both ranks],
    "device": [...], "compute_only": [...], "per_stream": {...}}; removed afterwards."""
    pytest.importorskip("torch")
    pytest.importorskip("hta")
    if not os.access(BINARY, os.X_OK):
        pytest.fail("no trainscope binary at %s (set TS_BINARY)" % BINARY)
    root = tempfile.mkdtemp(prefix="ts_hta_")
    try:
        out = os.path.join(root, "all")
        for _ in range(2):  # a second try, should another process take the free port first
            shutil.rmtree(out, ignore_errors=True)
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--make-traces", out],
                               capture_output=True, text=True, timeout=100)
            if p.returncode == 0:
                break
        assert p.returncode == 0, "making the traces failed:\n" + p.stderr[-3000:]
        files = sorted(glob.glob(os.path.join(out, "*.pt.trace.json")))
        # tensorboard_trace_handler: <worker>.<time ns>.pt.trace.json, one per window.
        per_rank = {}
        for f in files:
            per_rank.setdefault(os.path.basename(f).split(".")[0], []).append(f)
        assert sorted(per_rank) == ["rank0", "rank1"], files
        assert all(len(v) == 2 for v in per_rank.values()), files
        res = {"all": out, "windows": [], "device": [], "compute_only": [], "per_stream": {}}
        for w in range(2):
            dirs = {k: os.path.join(root, "%s%d" % (k, w)) for k in ("win", "dev", "comp")}
            for d in dirs.values():
                os.makedirs(d)
            for worker, fs in sorted(per_rank.items()):
                f = sorted(fs, key=lambda x: int(os.path.basename(x).split(".")[1]))[w]
                base = os.path.basename(f)
                shutil.copy(f, os.path.join(dirs["win"], base))
                res["per_stream"][(w, worker)] = write_device_view(
                    f, os.path.join(dirs["dev"], base))
                write_device_view(f, os.path.join(dirs["comp"], base), with_comm=False)
            res["windows"].append(dirs["win"])
            res["device"].append(dirs["dev"])
            res["compute_only"].append(dirs["comp"])
        yield res
    finally:
        shutil.rmtree(root, ignore_errors=True)


BAD_RECORD_FIELDS = ("malformed", "missing_fields", "unknown_category", "out_of_order",
                     "ids_above_2p53", "bad_args", "bad_category", "bad_dur", "bad_pid_tid",
                     "bad_ts", "bad_values", "negative_or_huge_dur")


def assert_clean_parse(r):
    parse = r["parse"]
    bad = {k: parse[k] for k in BAD_RECORD_FIELDS if parse.get(k)}
    assert not bad, "%s: bad records %s" % (r["path"], bad)
    assert not parse["truncated"] and not parse["warnings"] and not parse["unknown_categories"]
    assert parse["events_kept"] > 100, parse


# --- tests ---


def test_reader_one_rank_per_process_not_per_window(traces):
    doc = run_trainscope(traces["all"])
    ranks = by_rank(doc)
    assert len(doc["ranks"]) == WORLD and sorted(ranks) == [0, 1], \
        [(r["rank"], r["path"]) for r in doc["ranks"]]
    # Each rank is its two windows (files), by time; nothing skipped.
    assert doc["skipped"] == []
    files = [{os.path.basename(f) for f in glob.glob(os.path.join(traces["windows"][w], "*"))}
             for w in (0, 1)]
    alone = [by_rank(run_trainscope(traces["windows"][w])) for w in (0, 1)]
    for rank, r in ranks.items():
        assert r["rank_source"] == "distributedInfo"
        assert r["basis"] == "host" and r["device"] == "cpu"
        assert_clean_parse(r)
        assert len(r["windows"]) == 2, r["windows"]
        for w, win in enumerate(r["windows"]):
            assert win["file"] in files[w] and win["file"].startswith("rank%d." % rank)
            assert win["steps"] == alone[w][rank]["steps"]
        # The rank's steps are both windows' steps, each as the window alone gives it, and its
        # breakdown the sum of the windows' (HTA's figures per file).
        assert r["per_step"] == alone[0][rank]["per_step"] + alone[1][rank]["per_step"]
        for k in ("kernel_time_us", "compute_us", "non_compute_us", "idle_us"):
            total = sum(alone[w][rank]["temporal_breakdown"][k] for w in (0, 1))
            assert abs(r["temporal_breakdown"][k] - total) <= 0.02, (k, r["temporal_breakdown"])


@pytest.mark.parametrize("window", [0, 1])
def test_cpu_traces_steps_and_host_breakdown_match_hta_parse(traces, window):
    t = load_hta(traces["windows"][window])
    ours = by_rank(run_trainscope(traces["windows"][window]))
    assert sorted(ours) == sorted(t.t.get_ranks()) == [0, 1]
    hta_steps = [int(s) for s in t.get_profiler_steps()]
    for rank, r in ours.items():
        assert_clean_parse(r)
        assert r["basis"] == "host"
        # HTA leaves the last profiled step out (include_last_profiler_step=False).
        first = 2 + 5 * window
        assert hta_steps == [first, first + 1]
        assert r["steps"] == hta_steps
        ref = host_basis_from_hta(t, rank)
        assert [s["step_us"] for s in r["per_step"]] == ref["steps"]
        b = r["temporal_breakdown"]
        assert b["kernel_time_us"] == ref["kernel_time_us"]
        for k in ("compute", "non_compute", "idle"):
            want = points(ref[k + "_us"], ref["kernel_time_us"])
            assert abs(b[k + "_pct"] - want) <= TOL_POINTS, (rank, k, b, ref)
        assert ref["overlap_pct"] is not None and r["comm_comp_overlap_pct"] is not None
        assert abs(r["comm_comp_overlap_pct"] - ref["overlap_pct"]) <= TOL_POINTS, (rank, r, ref)
        print("window %d rank %d host basis: HTA parse compute/non-compute/idle %.3f/%.3f/%.3f "
              "overlap %.3f; trainscope %.2f/%.2f/%.2f overlap %.2f" % (
                  window, rank, points(ref["compute_us"], ref["kernel_time_us"]),
                  points(ref["non_compute_us"], ref["kernel_time_us"]),
                  points(ref["idle_us"], ref["kernel_time_us"]), ref["overlap_pct"],
                  b["compute_pct"], b["non_compute_pct"], b["idle_pct"],
                  r["comm_comp_overlap_pct"]))


def test_hta_on_cpu_traces(traces):
    """What HTA gives on the CPU traces as written; any figure it gives must be ours."""
    import numpy as np

    t = load_hta(traces["windows"][1])
    ours = by_rank(run_trainscope(traces["windows"][1]))
    outcome = {}
    try:
        df = t.get_temporal_breakdown(visualize=False)
        outcome["temporal"] = "ok"
        for _, row in df.iterrows():
            b = ours[int(row["rank"])]["temporal_breakdown"]
            for k, col in (("idle", "idle_time"), ("compute", "compute_time"),
                           ("non_compute", "non_compute_time")):
                want = points(row[col + "(us)"], row["kernel_time(us)"])
                assert abs(b[k + "_pct"] - want) <= TOL_POINTS, (k, row.to_dict(), b)
    except (IndexError, ValueError, KeyError) as e:  # no device events
        outcome["temporal"] = "%s: %s" % (type(e).__name__, e)
    try:
        t.get_idle_time_breakdown(ranks=[0, 1], visualize=False)
        outcome["idle"] = "ok"
    except (IndexError, ValueError, KeyError) as e:
        outcome["idle"] = "%s: %s" % (type(e).__name__, e)
    with np.errstate(invalid="ignore", divide="ignore"):
        ov = t.get_comm_comp_overlap(visualize=False)
    finite = ov[np.isfinite(ov["comp_comm_overlap_pctg"])]
    outcome["overlap"] = "%d of %d ranks finite" % (len(finite), len(ov))
    for _, row in finite.iterrows():
        mine = ours[int(row["rank"])]["comm_comp_overlap_pct"]
        assert mine is not None and abs(mine - row["comp_comm_overlap_pctg"]) <= TOL_POINTS
    print("HTA on CPU-only torch traces:", outcome)


@pytest.mark.parametrize("window", [0, 1])
def test_device_view_matches_hta(traces, window):
    for worker in ("rank0", "rank1"):
        per_stream = traces["per_stream"][(window, worker)]
        assert per_stream.get(COMPUTE_STREAM, 0) > 10 and any(
            s >= COMM_STREAM0 for s in per_stream), per_stream
    t = load_hta(traces["device"][window])
    ours = by_rank(run_trainscope(traces["device"][window]))
    temporal = t.get_temporal_breakdown(visualize=False)
    overlap = t.get_comm_comp_overlap(visualize=False)
    assert sorted(ours) == sorted(temporal["rank"].astype(int)) == [0, 1]
    for _, row in temporal.iterrows():
        rank = int(row["rank"])
        r = ours[rank]
        assert_clean_parse(r)
        assert r["basis"] == "device"
        b = r["temporal_breakdown"]
        kt = float(row["kernel_time(us)"])
        assert abs(points(b["kernel_time_us"] - kt, kt)) <= TOL_POINTS, (b, row.to_dict())
        for k, col in (("idle", "idle_time"), ("compute", "compute_time"),
                       ("non_compute", "non_compute_time")):
            want = points(float(row[col + "(us)"]), kt)
            assert abs(b[k + "_pct"] - want) <= TOL_POINTS, (rank, k, b, row.to_dict())
            # The times themselves, as points of the kernel time.
            assert abs(points(b[k + "_us"] - float(row[col + "(us)"]), kt)) <= TOL_POINTS
        hta_ov = float(overlap[overlap["rank"] == rank]["comp_comm_overlap_pctg"].iloc[0])
        assert r["comm_comp_overlap_pct"] is not None
        assert abs(r["comm_comp_overlap_pct"] - hta_ov) <= TOL_POINTS, (
            rank, r["comm_comp_overlap_pct"], hta_ov)
        print("window %d rank %d device view: HTA idle/compute/non-compute %.3f/%.3f/%.3f "
              "overlap %.2f; trainscope %.2f/%.2f/%.2f overlap %.2f" % (
                  window, rank, points(row["idle_time(us)"], kt),
                  points(row["compute_time(us)"], kt), points(row["non_compute_time(us)"], kt),
                  hta_ov, b["idle_pct"], b["compute_pct"], b["non_compute_pct"],
                  r["comm_comp_overlap_pct"]))


@pytest.mark.parametrize("window", [0, 1])
def test_compute_stream_idle_time_matches_hta_idle_breakdown(traces, window):
    """One stream: HTA's idle time breakdown (host wait + kernel wait + other) adds up to
    the stream's idle time, which is the temporal breakdown's idle."""
    t = load_hta(traces["compute_only"][window])
    ours = by_rank(run_trainscope(traces["compute_only"][window]))
    idle_df, _ = t.get_idle_time_breakdown(ranks=[0, 1], visualize=False)
    temporal = t.get_temporal_breakdown(visualize=False)
    for rank, r in ours.items():
        b = r["temporal_breakdown"]
        rows = idle_df[idle_df["rank"] == rank] if "rank" in idle_df else None
        assert rows is not None and set(rows["stream"]) == {COMPUTE_STREAM}, idle_df
        hta_idle = float(rows["idle_time"].sum())
        kt = float(temporal[temporal["rank"] == rank]["kernel_time(us)"].iloc[0])
        assert abs(points(b["idle_us"] - hta_idle, kt)) <= TOL_POINTS, (rank, b, idle_df)
        print("window %d rank %d compute stream: HTA idle time breakdown %s = %.0f us; "
              "trainscope idle %.0f us of %.0f" % (
                  window, rank, dict(zip(rows["idle_category"], rows["idle_time"])), hta_idle,
                  b["idle_us"], b["kernel_time_us"]))
        assert r["comm_comp_overlap_pct"] is None  # no communication: null, never NaN


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make-traces":
        make_traces(sys.argv[2])
    else:
        sys.exit(pytest.main([__file__, "-q"] + sys.argv[1:]))
