"""distributed.record on real 2-process gloo jobs: the hang watchdog and hang analyze."""
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import trainscope
from conftest import HERE, free_port, launch, trainscope_binary

JOB = os.path.join(HERE, "dist_job.py")


def hang_line():
    with open(JOB) as f:
        for i, line in enumerate(f, 1):
            if "HANG-LINE" in line:
                return i
    raise AssertionError("no HANG-LINE in dist_job.py")


def test_skipped_all_reduce_is_named(run_dir):
    t0 = time.monotonic()
    results = launch(JOB, ["hang", run_dir], timeout_s=3 + 30)
    elapsed = time.monotonic() - t0
    assert elapsed < 3 + 30
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 1, "rank %d: rc %d\n%s" % (rank, rc, err)
        assert "not reached" not in out
        assert os.path.exists(os.path.join(run_dir, "hang", "flight_recorder.rank%d.json" % rank))
        assert os.path.exists(os.path.join(run_dir, "hang", "stacks.rank%d.txt" % rank))
    assert "all_reduce #8" in results[0][2], results[0][2]
    site = "dist_job.py:%d" % hang_line()
    p = subprocess.run([trainscope_binary(), "hang", "analyze", os.path.join(run_dir, "hang"),
                        "--json"], capture_output=True, text=True)
    assert p.returncode in (0, 1), p.stderr
    verdict = json.loads(p.stdout)
    assert verdict["problem"], verdict
    first = verdict["findings"][0]
    assert first["culprit_ranks"] == [1], first
    assert first["op"] == "all_reduce", first
    assert site in first["caller"], first
    assert "rank 1" in first["sentence"] and site in first["sentence"], first["sentence"]


def test_ddp_run_records_buckets_and_writes_metrics(run_dir):
    results = launch(JOB, ["ddp", run_dir], timeout_s=60)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, "rank %d: %s" % (rank, err)
    for rank in range(2):
        with open(os.path.join(run_dir, "hang", "flight_recorder.rank%d.json" % rank)) as f:
            dump = json.load(f)
        entries = dump["entries"]
        # 6 steps x at least one bucket all-reduce, all completed, called from the job's
        # loss.backward() line (through DDP's comm hook).
        ar = [e for e in entries if e["profiling_name"].endswith("all_reduce")]
        assert len(ar) >= 6, entries
        assert all(e["state"] == "completed" for e in ar), ar
        assert all(e["caller"].startswith("dist_job.py:") for e in ar), ar
        with open(os.path.join(run_dir, "train", "metrics.rank%d.jsonl" % rank)) as f:
            recs = [json.loads(line) for line in f]
        steps = [r for r in recs if r["type"] == "step"]
        assert [r["step"] for r in steps] == list(range(1, 7))
        assert all(r["comm_ms"] > 0 for r in steps), steps
        assert recs[0]["world_size"] == 2 and recs[0]["rank"] == rank
        assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "done"
    p = subprocess.run([trainscope_binary(), "hang", "analyze", os.path.join(run_dir, "hang"),
                        "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["problem"] is False


def test_nan_on_one_rank_of_ddp(run_dir):
    # Rank 1's forward turns NaN at step 3; DDP's all-reduce spreads its NaN gradients. Rank 1
    # localises its own forward; rank 0 sees its gradients were finite before the all-reduce.
    results = launch(JOB, ["nan", run_dir], timeout_s=60)
    seen = []
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, "rank %d: rc %d\n%s" % (rank, rc, err)
        seen.append(json.loads(out.strip().splitlines()[-1]))
    assert seen[1] == {"step": 3, "rank": 1, "phase": "forward", "module": "layer2",
                       "from_other_rank": False}
    assert seen[0] == {"step": 3, "rank": 0, "phase": "backward", "module": "",
                       "from_other_rank": True}


def test_record_before_init_process_group_is_an_error():
    assert not dist.is_initialized()
    with pytest.raises(trainscope.Error, match="init_process_group"):
        trainscope.distributed.record()


def test_record_call_sites_counts_and_groups_in_process(tmp_path):
    # One rank in this process. The caller recorded is the first frame outside torch and
    # trainscope, also through a helper counted as library code (added to the prefixes
    # skipped), and the call-site cache (keyed by the calling instruction) keeps the two
    # callers of the helper's one line apart.
    helper = tmp_path / "lib" / "ts_helper.py"
    helper.parent.mkdir()
    helper.write_text("import torch.distributed as dist\n\n\n"
                      "def reduce(t, **kw):\n    return dist.all_reduce(t, **kw)\n")
    spec = importlib.util.spec_from_file_location("ts_helper", str(helper))
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % free_port(), rank=0,
                            world_size=1)
    try:
        rec = trainscope.distributed.record(run_dir=str(tmp_path / "run"))
        rec._skip = rec._skip + (str(helper.parent),)
        line = sys._getframe().f_lineno
        for _ in range(3):
            dist.all_reduce(torch.ones(4))  # line + 2
            dist.all_reduce(torch.ones(2, dtype=torch.float64), async_op=True).wait()  # + 3
            lib.reduce(torch.ones(3, dtype=torch.float16))  # + 4
            lib.reduce(torch.ones(1, dtype=torch.int64), group=None)  # + 5
        sub = dist.new_group([0])
        dist.all_gather([torch.zeros(6)], torch.ones(6), sub)
        dist.barrier()
        entries = json.loads(rec.fr.dump_string())["entries"]
    finally:
        trainscope.distributed.stop()
        dist.destroy_process_group()
    here = os.path.basename(__file__)
    got = [(e["profiling_name"], e["process_group"][0], e["collective_seq_id"], e["caller"],
            e["input_sizes"], e["input_dtypes"][0] if e["input_dtypes"] else "", e["async"],
            e["state"]) for e in entries]
    want = []
    for i in range(3):
        want += [("gloo:all_reduce", "0", 4 * i + 1, "%s:%d" % (here, line + 2), [[4]], "Float",
                  False, "completed"),
                 ("gloo:all_reduce", "0", 4 * i + 2, "%s:%d" % (here, line + 3), [[2]], "Float",
                  True, "completed"),
                 ("gloo:all_reduce", "0", 4 * i + 3, "%s:%d" % (here, line + 4), [[3]],
                  "Half", False, "completed"),
                 ("gloo:all_reduce", "0", 4 * i + 4, "%s:%d" % (here, line + 5), [[1]], "Long",
                  False, "completed")]
    sub_name = got[12][1]
    assert sub_name != "0", got[12]
    want += [("gloo:all_gather", sub_name, 1, "%s:%d" % (here, line + 7), [[6]], "Float",
              False, "completed"),
             ("gloo:barrier", "0", 13, "%s:%d" % (here, line + 8), [], "", False, "completed")]
    assert got == want
