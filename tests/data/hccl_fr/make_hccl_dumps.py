#!/usr/bin/python3
"""Writes the HCCL flight recorder fixtures (tests/data/hccl_fr/<case>/hccl_trace_rank_<R>).

No dump written by torch_npu on a real NPU is public, so these are built the way torch_npu's
writer builds them (Ascend/pytorch torch_npu/csrc/distributed/TraceUtils.h, HCCLTraceBuffer::dump
and getCollectiveTrace, version "2.4"), and with the values its own test asserts
(test/distributed/test_flight_recorder.py): a pickle (torch::jit::Pickler, protocol 2: see
TorchLikePickler) of {"version": "2.4", "pg_config": {"group_name_0": {"name", "desc", "ranks":
"[0, 1, ...]"}}, "pg_status": {"0": {"last_enqueued_collective": int, ...}}, "entries": [...]};
each entry with record_id, pg_id, process_group (name, desc) as a tuple, collective_seq_id,
p2p_seq_id, op_id, profiling_name "" (torch_npu does not fill it: "profiling is not supported"),
time_created_ns, input/output sizes and dtypes ("Float"), state "scheduled" or "completed"
(without TORCH_HCCL_ENABLE_TIMING never "started"), time_discovered_started_ns None,
time_discovered_completed_ns, retired, timeout_ms 3636000 (HCCL_EXEC_TIMEOUT's default with
its margin, as the test asserts), is_p2p, and the Python frames innermost first (frames[0]
names the c10d function, which is where Ascend's analysis_flight.py takes the op name from).
File names as TORCH_HCCL_DEBUG_INFO_TEMP_FILE's default prefix: /tmp/hccl_trace_rank_<R>.

The three cases are the three classes of Ascend's analysis_flight.py (branch v2.7.1-7.2.0,
tools/flight_recorder/): a rank stuck in compute, a long non-communication task after the
last collective, a collective that timed out executing. Deterministic; re-run after changing:
python3 make_hccl_dumps.py
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hang"))
from make_fixtures import torch_like_pickle  # noqa: E402  (the torch::jit::Pickler opcodes)

C10D = "/usr/local/python3.10/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/usr/local/python3.10/lib/python3.10/site-packages/torch/distributed/c10d_logger.py"
# distributed_c10d.py line of each function's backend call (torch 2.6), and the caller's line.
C10D_LINE = {"all_reduce": 2806, "broadcast": 2730, "all_gather_into_tensor": 3842,
             "reduce_scatter_tensor": 4335, "barrier": 4736}
T0 = 1_740_000_000_000_000_000  # ns since the epoch; hosts' clocks agree


class Rank:
    def __init__(self, rank, world):
        self.rank, self.world, self.entries = rank, world, []
        self.seq = 0

    def op(self, name, shape, state="completed", step=1, caller=("train_step", "train.py", 61)):
        self.seq += 1
        rid = len(self.entries)
        t = T0 + self.seq * 2_000_000_000 + self.rank * 1000
        done = t + 1_500_000 if state == "completed" else None
        out = [shape[0] * self.world] + shape[1:] if name == "all_gather_into_tensor" else shape
        if name == "reduce_scatter_tensor":
            out = [shape[0] // self.world] + shape[1:]
        frames = [{"name": name, "filename": C10D, "line": C10D_LINE[name]},
                  {"name": "wrapper", "filename": LOGGER, "line": 83},
                  {"name": caller[0], "filename": caller[1], "line": caller[2]},
                  {"name": "main", "filename": "train.py", "line": 140 + step}]
        self.entries.append({
            "frames": frames, "record_id": rid, "pg_id": 0,
            "process_group": ("group_name_0", ""),
            "collective_seq_id": self.seq, "p2p_seq_id": 0, "op_id": self.seq,
            "profiling_name": "", "time_created_ns": t,
            "input_sizes": [shape], "input_dtypes": ["Float"],
            "output_sizes": [out], "output_dtypes": ["Float"], "state": state,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": done,
            "retired": state == "completed", "timeout_ms": 3636000, "is_p2p": False,
        })
        return self

    def step(self, n, last_state="completed", stop_before=None):
        ops = [("all_reduce", [4096, 1024]), ("all_gather_into_tensor", [2048]),
               ("reduce_scatter_tensor", [16384])]
        for i, (name, shape) in enumerate(ops):
            if stop_before is not None and i == stop_before:
                return self
            state = last_state if i == len(ops) - 1 else "completed"
            self.op(name, shape, state=state, step=n)
        return self

    def doc(self):
        done = [e["collective_seq_id"] for e in self.entries if e["state"] == "completed"]
        return {
            "version": "2.4",
            "pg_config": {"group_name_0": {"name": "group_name_0", "desc": "",
                                           "ranks": "[" + ", ".join(map(str, range(self.world))) + "]"}},
            "pg_status": {"0": {"last_enqueued_collective": self.seq,
                                "last_started_collective": -1,
                                "last_completed_collective": max(done, default=-1)}},
            "entries": self.entries,
        }


def write(case, rank, truncate=None):
    d = os.path.join(HERE, case)
    os.makedirs(d, exist_ok=True)
    data = torch_like_pickle(rank.doc())
    with open(os.path.join(d, f"hccl_trace_rank_{rank.rank}"), "wb") as f:
        f.write(data[:truncate] if truncate else data)


def main():
    for entry in os.listdir(HERE):
        if os.path.isdir(os.path.join(HERE, entry)) and entry != "__pycache__":
            shutil.rmtree(os.path.join(HERE, entry))
    world = 8
    # Class 1: rank 5 is still computing (its last collective completed); the other 7 ranks
    # enqueued the next all_reduce, which waits for rank 5 (record id one above rank 5's last).
    # The monitor on rank 0 dumps and the others dump on its signal (test_timeout_dumps_on_stuck_ranks).
    for r in range(world):
        k = Rank(r, world).step(1).step(2)
        if r == 5:
            write("compute_stuck", k)
        else:
            write("compute_stuck", k.op("all_reduce", [4096, 1024], state="scheduled", step=3))
    with open(os.path.join(HERE, "compute_stuck", "hccl_trace_rank_5_py_traceback"), "w") as f:
        f.write("thread <_MainThread(MainThread, started 281473357488160)>:\n"
                '  File "train.py", line 143, in <module>\n    main()\n'
                '  File "train.py", line 118, in main\n    loss = compute_loss(model, batch)\n'
                '  File "train.py", line 52, in compute_loss\n    return model(batch).sum()\n')
    # Class 2: every rank completed its last collective (reduce_scatter of step 3) and none
    # enqueued another: the time goes into work after it (the heartbeat monitor dumped).
    for r in range(world):
        write("long_task_after_collective", Rank(r, world).step(1).step(2).step(3))
    # Class 3: every rank enqueued the same all_gather (same record id and name) and none saw
    # it complete: the collective itself timed out executing.
    for r in range(world):
        k = Rank(r, world).step(1).step(2).op("all_reduce", [4096, 1024], step=3)
        write("collective_timeout", k.op("all_gather_into_tensor", [2048], state="scheduled", step=3))
    # Bad input: the compute_stuck dumps with rank 6's file cut in half: counted as corrupt,
    # the other seven still classified.
    for r in range(world):
        k = Rank(r, world).step(1).step(2)
        if r != 5:
            k.op("all_reduce", [4096, 1024], state="scheduled", step=3)
        size = len(torch_like_pickle(k.doc()))
        write("truncated_rank", k, truncate=size // 2 if r == 6 else None)


if __name__ == "__main__":
    main()
