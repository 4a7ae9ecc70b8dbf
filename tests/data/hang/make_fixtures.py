#!/usr/bin/python3
"""Writes the hang-analysis fixtures (tests/data/hang/<case>/): hand-made flight recorder
dumps in PyTorch's layout, JSON (as dump_json writes it: times 0, pg_status strings) and
pickle (as PyTorch's default dump: process_group a tuple, times None, pg_status ints, frames),
named as PyTorch names them (`nccl_trace_rank_<R>`, no extension) or as trainscope does.
Deterministic; re-run after changing it and commit the output:  python3 make_fixtures.py
"""
import io, json, os, pickle, shutil

HERE = os.path.dirname(os.path.abspath(__file__))


class TorchLikePickler(pickle._Pickler):
    """Protocol 2 restricted to the opcodes torch::jit::Pickler writes (and libtorch 1.13's
    unpickler reads): a dict's items always as MARK ... SETITEMS, a list's as MARK ...
    APPENDS (never SETITEM, APPEND)."""

    def _batch_appends(self, items):
        self.write(pickle.MARK)
        for x in items:
            self.save(x)
        self.write(pickle.APPENDS)

    def _batch_setitems(self, items):
        self.write(pickle.MARK)
        for k, v in items:
            self.save(k)
            self.save(v)
        self.write(pickle.SETITEMS)


def torch_like_pickle(obj):
    buf = io.BytesIO()
    TorchLikePickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


class Rank:
    """One rank's recorder: entries with PyTorch's keys, record ids from `first_record_id`."""

    def __init__(self, rank, groups, first_record_id=0, backend="nccl", version="2.10"):
        self.rank, self.groups, self.backend, self.version = rank, groups, backend, version
        self.next_id, self.entries = first_record_id, []
        self.seq = {}  # pg name -> last collective_seq_id

    def op(self, name, size, pg="0", state="completed", dtype="Float", caller=None, out=None,
           seq=None, frames=None):
        self.seq[pg] = seq if seq is not None else self.seq.get(pg, 0) + 1
        # Host clocks agree across ranks: time follows the default group's progress.
        t = (1_700_000_000_000_000_000 + self.seq.get("0", 0) * 1_000_000 + int(pg) * 10_000
             + self.seq[pg] * 10 + self.rank)
        e = {
            "record_id": self.next_id, "pg_id": int(pg),
            "process_group": (pg, self.groups[pg][0]),
            "collective_seq_id": self.seq[pg], "p2p_seq_id": 0, "op_id": self.next_id + 1,
            "profiling_name": f"{self.backend}:{name}", "time_created_ns": t,
            "input_sizes": [[size]], "output_sizes": [[out if out is not None else size]],
            "input_dtypes": [dtype], "output_dtypes": [dtype], "state": state,
            "time_discovered_started_ns": t + 10 if state != "scheduled" else None,
            "time_discovered_completed_ns": t + 20 if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False,
        }
        if caller is not None:
            e["caller"] = caller
        if frames:
            e["frames"] = [{"name": f, "filename": "train.py", "line": 100 + i} for i, f in enumerate(frames)]
        self.entries.append(e)
        self.next_id += 1
        return self

    def steps(self, first, last, sizes, callers=True, pg="0"):
        for s in range(first, last + 1):
            for b, size in enumerate(sizes):
                self.op("all_reduce", size, pg=pg, caller=f"step {s} grad bucket {b}" if callers else None)
        return self

    def doc(self, pickled):
        status = {}
        for pg in self.groups:
            seqs = [e["collective_seq_id"] for e in self.entries if e["process_group"][0] == pg]
            done = [e["collective_seq_id"] for e in self.entries
                    if e["process_group"][0] == pg and e["state"] == "completed"]
            vals = {"last_enqueued_collective": max(seqs, default=-1),
                    "last_started_collective": max(seqs, default=-1),
                    "last_completed_collective": max(done, default=-1)}
            status[pg] = vals if pickled else {k: str(v) for k, v in vals.items()}
        entries = []
        for e in self.entries:
            e = dict(e)
            if pickled:
                e.setdefault("frames", [])
            else:
                e["process_group"] = list(e["process_group"])
                e.pop("frames", None)
                for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                    e[k] = e[k] or 0
            entries.append(e)
        return {
            "version": self.version, "comm_lib_version": "2.21.5",
            "pg_config": {pg: {"name": pg, "desc": d, "ranks": str(r)} for pg, (d, r) in self.groups.items()},
            "pg_status": status, "entries": entries, "rank": self.rank,
        }


def write(case, name, rank, fmt="json", protocol=None, drop_rank_key=False):
    d = os.path.join(HERE, case)
    os.makedirs(d, exist_ok=True)
    doc = rank.doc(fmt == "pickle")
    if drop_rank_key:
        del doc["rank"]  # the rank then comes from the file name, as fr_trace reads it
    path = os.path.join(d, name)
    if fmt == "pickle":  # PyTorch's writer; protocol=N: Python's pickle.dumps at protocol N
        with open(path, "wb") as f:
            f.write(torch_like_pickle(doc) if protocol is None else pickle.dumps(doc, protocol=protocol))
    else:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return path


def world(n):
    return {"0": ("default_pg", list(range(n)))}


def main():
    for entry in os.listdir(HERE):
        if os.path.isdir(os.path.join(HERE, entry)) and entry != "__pycache__":
            shutil.rmtree(os.path.join(HERE, entry))

    # healthy: 2 ranks, 5 steps of 2 buckets, everything completed. Exit 0.
    for r in range(2):
        write("healthy", f"nccl_trace_rank_{r}", Rank(r, world(2)).steps(1, 5, [1024, 512]), drop_rank_key=True)

    # not_joined: 4 ranks; rank 2 is elsewhere (asleep) while 0, 1, 3 are in #9.
    for r in range(4):
        k = Rank(r, world(4)).steps(1, 4, [1024, 512])
        if r != 2:
            k.op("all_reduce", 1024, state="started", caller="step 5 grad bucket 0")
        write("not_joined", f"nccl_trace_rank_{r}", k)

    # skipped: 2 ranks (no majority); rank 1 skipped bucket 0 of step 5 and is in bucket 1.
    for r in range(2):
        k = Rank(r, world(2)).steps(1, 4, [1024, 512, 256])
        if r == 0:
            k.op("all_reduce", 1024, state="started", caller="step 5 grad bucket 0")
        else:
            k.op("all_reduce", 512, state="started", caller="step 5 grad bucket 1")
        write("skipped", f"nccl_trace_rank_{r}", k)

    # type_mismatch: 2 ranks; rank 0 issues all_gather where the call site always issued
    # all_reduce.
    for r in range(2):
        k = Rank(r, world(2)).steps(1, 3, [1024, 512])
        if r == 0:
            k.op("all_gather", 1024, out=2048, state="started", caller="step 4 grad bucket 0")
        else:
            k.op("all_reduce", 1024, state="started", caller="step 4 grad bucket 0")
        write("type_mismatch", f"nccl_trace_rank_{r}", k)

    # size_mismatch in a sub-group: pg "1" (tp) = ranks [0, 2] of 3, buffers wrapped by
    # different amounts (first record ids 0, 3, 6); rank 2 reduces 700 elements where each
    # step reduced 512; no callers (the per-step pattern decides).
    groups = {"0": ("default_pg", [0, 1, 2]), "1": ("tp", [0, 2])}
    for r in range(3):
        g = groups if r != 1 else {"0": groups["0"]}
        k = Rank(r, g, first_record_id=0)
        for s in range(1, 7):
            k.op("all_reduce", 4096)
            if r != 1:
                k.op("_all_gather_base", 256, out=512, pg="1")
                if s < 6:
                    k.op("all_reduce", 512, pg="1")
        if r != 1:
            k.op("all_reduce", 512 if r == 0 else 700, pg="1", state="started")
        else:
            k.op("all_reduce", 4096, state="scheduled")
        drop = {0: 0, 1: 3, 2: 6}[r]
        k.entries = k.entries[drop:]
        write("size_mismatch", f"nccl_trace_rank_{r}", k)

    # pickle_dtype_mismatch: pickle as PyTorch writes it, 2 ranks, frames recorded; rank 1 calls
    # with BFloat16.
    for r in range(2):
        k = Rank(r, world(2)).steps(1, 3, [1024], callers=False)
        k.op("all_reduce", 1024, state="started", dtype="BFloat16" if r == 1 else "Float",
             frames=["reduce_grads", "train_step"])
        write("pickle_dtype_mismatch", f"nccl_trace_rank_{r}", k, fmt="pickle")

    # pickle_state_mismatch: pickle as PyTorch writes it; rank 0 entered #4 and never started it
    # while rank 1 did.
    for r in range(2):
        k = Rank(r, world(2)).steps(1, 3, [1024], callers=False)
        k.op("all_reduce", 1024, state="scheduled" if r == 0 else "started")
        write("pickle_state_mismatch", f"nccl_trace_rank_{r}", k, fmt="pickle")

    # pickle_python: the same dumps written by Python's pickle.dumps at protocols 2 and 4
    # (SETITEM, MEMOIZE, FRAME: opcodes torch::jit::Pickler never writes), read like the others.
    for r, protocol in ((0, 2), (1, 4)):
        k = Rank(r, world(2)).steps(1, 2, [1024], callers=False)
        write("pickle_python", f"nccl_trace_rank_{r}", k, fmt="pickle", protocol=protocol)

    # missing_dump: 4 ranks, rank 3's dump is truncated (counted as corrupt), rank 1 left
    # none at all is not the case: only 3 is missing. Ranks 0-2 wait in #7.
    for r in range(4):
        k = Rank(r, world(4)).steps(1, 3, [1024, 512])
        k.op("all_reduce", 1024, state="started", caller="step 4 grad bucket 0")
        p = write("missing_dump", f"nccl_trace_rank_{r}", k)
        if r == 3:
            with open(p, "rb") as f:
                data = f.read()
            with open(p, "wb") as f:
                f.write(data[: len(data) // 3])

    # junk: a healthy pair of trainscope-named dumps among files that are not dumps.
    for r in range(2):
        write("junk", f"flight_recorder.rank{r}.json", Rank(r, world(2), backend="gloo").steps(1, 2, [64]))
    d = os.path.join(HERE, "junk")
    with open(os.path.join(d, "README.txt"), "w") as f:
        f.write("not a dump\n")
    with open(os.path.join(d, "metrics.json"), "w") as f:
        f.write('{"loss": 1.5}\n')
    with open(os.path.join(d, "core.bin"), "wb") as f:
        f.write(bytes(range(256)))
    with open(os.path.join(d, "empty"), "w") as f:
        pass

    # number_overflow: the healthy pair, rank 1's first time_created_ns the number 1e309 (beyond
    # a double): a corrupt dump, counted, not an internal error.
    for r in range(2):
        p = write("number_overflow", f"nccl_trace_rank_{r}", Rank(r, world(2)).steps(1, 5, [1024, 512]),
                  drop_rank_key=True)
    with open(p) as f:
        text = f.read()
    at = text.index('"time_created_ns": ') + len('"time_created_ns": ')
    with open(p, "w") as f:
        f.write(text[:at] + "1e309" + text[text.index(",", at):])

    # run_dir: a trainscope run directory (hang/ folder with thread stacks beside the dumps,
    # other files above it), versions 2.8 and 2.10 mixed.
    for r in range(2):
        k = Rank(r, world(2), backend="gloo", version="2.10" if r == 0 else "2.8").steps(1, 2, [64])
        if r == 0:
            k.op("all_reduce", 64, state="started", caller="step 3 grad bucket 0")
        write(os.path.join("run_dir", "hang"), f"flight_recorder.rank{r}.json", k)
        with open(os.path.join(HERE, "run_dir", "hang", f"stacks.rank{r}.txt"), "w") as f:
            f.write(f"rank {r} thread 1 (main):\n  #0 nanosleep\n")  # companions: not read
    with open(os.path.join(HERE, "run_dir", "config.json"), "w") as f:
        f.write('{"train": {}}\n')


if __name__ == "__main__":
    main()
