"""trainscope._core against the CLI: the same dicts as `trainscope ... --json` on the test
fixtures, trainscope._core.Error naming the file on bad input, the checkpoint primitives
read back and accepted by `trainscope ckpt verify`, flight recorder dumps that `trainscope
hang analyze` reads, and `import trainscope` before and after `import torch`.

Run by ctest (python.native) with PYTHONPATH=build/python, TS_BINARY=build/bin/trainscope,
TS_SOURCE_DIR=the checkout.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import trainscope
from trainscope import _api, _core

SRC = os.environ.get("TS_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DATA = os.path.join(SRC, "tests", "data")
BINARY = os.environ.get("TS_BINARY", os.path.join(SRC, "build", "bin", "trainscope"))
ENV = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")


def cli_json(*args, ok_codes=(0, 1)):
    p = subprocess.run([BINARY, *args, "--json"], capture_output=True, text=True, env=ENV,
                       timeout=120)
    assert p.returncode in ok_codes, p.stderr
    return json.loads(p.stdout)


def without(d, *keys):
    return {k: v for k, v in d.items() if k not in keys}


# --- the analyses: the same dicts as the CLI ---------------------------------------------

def test_trace_analyze_equals_cli():
    paths = [os.path.join(DATA, "trace", "ddp_rank0.pt.trace.json"),
             os.path.join(DATA, "trace", "ddp_rank1.pt.trace.json")]
    native = _api.trace_analyze(paths)
    assert native == cli_json("trace", "analyze", *paths)
    assert [r["rank"] for r in native["ranks"]] == [0, 1]
    assert _api.trace_analyze(paths, top=3) == cli_json("trace", "analyze", *paths, "--top", "3")


def test_data_scan_equals_cli(tmp_path):
    corpus = os.path.join(DATA, "data", "small.jsonl")
    native = _api.data_scan(corpus, threads=2, tmp_dir=str(tmp_path))
    cli = cli_json("data", "scan", corpus, "--threads", "2", "--tmp-dir", str(tmp_path))
    assert without(native, "wall_s") == without(cli, "wall_s")
    tok = os.path.join(DATA, "tokenizer", "gpt2_tiny.json")
    native = _api.data_scan(corpus, threads=2, tokenizer=tok, near_dup=False)
    cli = cli_json("data", "scan", corpus, "--threads", "2", "--tokenizer", tok, "--no-near-dup")
    assert without(native, "wall_s") == without(cli, "wall_s")
    assert native["tokenizer"] != cli_json("data", "scan", corpus, "--exact-only")["tokenizer"]
    exact = _api.data_scan([corpus], threads=1, exact_only=True, fail_on="none")
    cli = cli_json("data", "scan", corpus, "--threads", "1", "--exact-only", "--fail-on", "none")
    assert without(exact, "wall_s") == without(cli, "wall_s")


def test_diagnose_equals_cli():
    paths = [os.path.join(DATA, "diagnose", n)
             for n in ("duplicate_data.csv", "duplicate_data.jsonl")]
    assert _api.diagnose(paths) == cli_json("diagnose", *paths)


def test_hang_analyze_equals_cli():
    for case in ("healthy", "size_mismatch"):
        path = os.path.join(DATA, "hang", case)
        assert _api.hang_analyze(path) == cli_json("hang", "analyze", path)
    path = os.path.join(DATA, "hang", "size_mismatch")
    assert (_api.hang_analyze([path], mismatch_cap=1)
            == cli_json("hang", "analyze", path, "--mismatch-cap", "1"))


def test_ckpt_inspect_verify_diff_equal_cli():
    run = os.path.join(DATA, "ckpt", "run", "checkpoints")
    a, b = os.path.join(run, "step-10"), os.path.join(run, "step-20")
    assert _api.ckpt_inspect(run) == cli_json("ckpt", "inspect", run)
    assert _api.ckpt_verify([a, b]) == cli_json("ckpt", "verify", a, b)
    assert _api.ckpt_diff(a, b) == cli_json("ckpt", "diff", a, b)


def test_env_fingerprint_is_the_cli_document():
    fp = _api.env_fingerprint(timeout_ms=5000)
    cli = cli_json("env", "fingerprint", ok_codes=(0,))
    assert fp["format"] == cli["format"] and fp["version"] == cli["version"]
    assert set(fp) == set(cli)


# --- errors: one exception type, naming the file -----------------------------------------

def test_errors_raise_core_error_naming_the_file(tmp_path):
    assert issubclass(_core.Error, RuntimeError)
    assert trainscope.Error is _core.Error
    missing = str(tmp_path / "nope.json")
    with pytest.raises(_core.Error, match="nope.json"):
        _api.trace_analyze(missing)
    with pytest.raises(_core.Error, match="nope.json"):
        _api.diagnose(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{ not a trace")
    with pytest.raises(_core.Error, match="bad.json"):
        _api.trace_analyze(str(bad))
    with pytest.raises(_core.Error, match="nope.jsonl"):
        _api.data_scan(str(tmp_path / "nope.jsonl"))
    with pytest.raises(_core.Error, match="unknown option 'thread'"):
        _api.data_scan(os.path.join(DATA, "data", "small.jsonl"), thread=2)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(_core.Error, match="empty: no flight recorder dump"):
        _api.hang_analyze(str(empty))
    with pytest.raises(_core.Error, match="nope"):
        _api.ckpt_verify(str(tmp_path / "nope"))


def test_json_policy_out_of_range_and_deep_are_one_error(tmp_path):
    # The shared JSON policy (core/json_text.h) through the binding's checkpoint reader: a
    # number out of range or 100,000-deep nesting is one trainscope error with the byte.
    for name, text, want in [
            ("a.json", '{"x": 1e309}', r"a.json: not valid JSON at byte 6: .*number overflow"),
            ("b.json", '{"x": 18446744073709551616}',
             r"b.json: not valid JSON at byte 6: number out of range: integer"),
            ("c.json", "[" * 100000 + "]" * 100000, r"c.json: JSON nested deeper than 64 at byte 64")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(_core.Error, match=want) as e:
            _core.ckpt_read_json(str(tmp_path), name)
        assert "\n" not in str(e.value)
    (tmp_path / "ok.json").write_text('{"x": 18446744073709551615, "y": 1e-400}')
    assert _core.ckpt_read_json(str(tmp_path), "ok.json") == {"x": 18446744073709551615, "y": 0.0}


# --- checkpoint primitives -------------------------------------------------------------

def test_ckpt_write_read_verify_prune_latest(tmp_path):
    d = str(tmp_path / "checkpoints")
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    steps = np.array([7], dtype=np.int64)
    bf16 = np.array([0x3F80, 0x4000], dtype=np.int16)  # 1.0, 2.0 as bfloat16 bits
    paths = []
    for step in (10, 20, 30):
        paths.append(_core.ckpt_write(
            d, step, [("layer.weight", "float32", w.shape, w),
                      ("bf", "torch.bfloat16", [2], bf16)],
            {"note": "hello", "step": step},
            optimizer=[("adam.steps", "I64", [1], memoryview(steps.tobytes()))],
            json_files={"rank0.json": {"rng": [1, 2, 3]}}, fsync=False))
    assert paths[0] == os.path.join(d, "step-10")
    tensors, meta = _core.ckpt_read(paths[-1])
    assert meta == {"note": "hello", "step": 30}
    names = {t[0]: t for t in tensors}
    name, dtype, shape, data = names["layer.weight"]
    assert (dtype, shape) == ("F32", [3, 4])
    assert np.array_equal(np.frombuffer(data, dtype=np.float32).reshape(3, 4), w)
    assert names["bf"][1] == "BF16"
    opt, _ = _core.ckpt_read(paths[-1], part="optimizer")
    assert opt[0][0] == "adam.steps" and np.frombuffer(opt[0][3], np.int64)[0] == 7
    assert _core.ckpt_read_json(paths[-1], "rank0.json") == {"rng": [1, 2, 3]}
    # The CLI accepts what the module wrote.
    assert cli_json("ckpt", "verify", d)["ok"] is True
    assert _core.ckpt_latest(str(tmp_path)) == paths[-1]
    assert _core.ckpt_latest(str(tmp_path / "none-yet")) is None
    assert sorted(_core.ckpt_prune(d, 2)) == [paths[0]]
    assert not os.path.exists(paths[0])
    # A corrupted file is refused on read, naming it.
    with open(os.path.join(paths[-1], "rank0.json"), "w") as f:
        f.write('{"rng": [9]}')
    with pytest.raises(_core.Error, match="rank0.json"):
        _core.ckpt_read(paths[-1])
    assert _core.ckpt_latest(d) == paths[1]
    # Bad tensors: wrong byte count, a non-buffer, an existing step.
    with pytest.raises(_core.Error, match="layer.weight"):
        _core.ckpt_write(d, 40, [("layer.weight", "F32", [5], w)], fsync=False)
    with pytest.raises(_core.Error, match="buffer protocol"):
        _core.ckpt_write(d, 41, [("x", "F32", [1], 1.0)], fsync=False)
    with pytest.raises(_core.Error, match="step-20"):
        _core.ckpt_write(d, 20, [("x", "F32", [1], np.zeros(1, np.float32))], fsync=False)
    with pytest.raises(_core.Error, match="cannot be stored in JSON"):
        _core.ckpt_write(d, 42, [], {"bad": object()}, fsync=False)


# --- flight recorder -------------------------------------------------------------------

def test_flight_recorder_dumps_what_hang_analyze_reads(tmp_path):
    # Two ranks: rank 1 skips the all_reduce of step 5, rank 0 waits in it.
    for rank in (0, 1):
        fr = _core.FlightRecorder(rank, 2, capacity=100, backend="gloo", timeout_ms=600000)
        for step in range(1, 8):
            if rank == 1 and step == 5:
                break
            i = fr.start("all_reduce", count=1024, dtype="torch.float32",
                         call_site="train.py:%d" % (40 + step))
            if rank == 0 and step == 5:
                break  # waits for rank 1 forever
            fr.complete(i)
        assert fr.recorded == (5 if rank == 0 else 4)
        age, op, seq, site = fr.oldest_pending()
        if rank == 0:
            assert (op, seq, site) == ("all_reduce", 5, "train.py:45") and age >= 0
        fr.dump(str(tmp_path / ("rank%d.json" % rank)), "test: watchdog")
    dump = json.loads((tmp_path / "rank0.json").read_text())
    assert dump["trainscope"]["reason"] == "test: watchdog"
    assert dump["entries"][-1]["caller"] == "train.py:45"
    native = _api.hang_analyze(str(tmp_path))
    assert native == cli_json("hang", "analyze", str(tmp_path))
    assert native["problem"] is True
    text = json.dumps(native["findings"])
    assert "all_reduce" in text and "rank 1" in text, text


def test_flight_recorder_bad_input_and_speed():
    fr = _core.FlightRecorder(0, 1)
    with pytest.raises(_core.Error, match="unknown op"):
        fr.start("all_reduse")
    with pytest.raises(_core.Error, match="process group 'tp'"):
        fr.start("all_reduce", group="tp")
    with pytest.raises(_core.Error):
        _core.FlightRecorder(3, 2)
    fr.register_group("tp", [0], "tensor parallel")
    fr.complete(fr.start("send", count=4, group="tp", peer=0))

    def pair():
        fr.complete(fr.start("all_reduce", 0, 1024, "float32", "0", "train.py:10"))

    # Its cost is measured in bench/python/bench_overhead.py, side by side with a no-op; a time
    # limit here would fail on a busy machine. This only checks that many pairs leave nothing open.
    for _ in range(5000):
        pair()
    assert fr.oldest_pending() == (0.0, "", 0, "") and fr.recorded == 5001


def test_flight_recorder_fast_calls_record_what_start_records():
    # The same calls through start()/complete() and through fast_calls() give the same dump
    # (times and threads apart).
    slow, fast = _core.FlightRecorder(0, 2), _core.FlightRecorder(0, 2)
    for fr in (slow, fast):
        assert fr.register_group("tp", [1, 0], "tensor parallel") == 1
    start, complete = fast.fast_calls()
    code = _core.FlightRecorder
    assert fast.group_id("tp") == 1 and fast.group_id("0") == 0
    assert fast.site_id("a.py:1") == fast.site_id("a.py:1") != fast.site_id("b.py:2")
    calls = [("all_reduce", 8, "torch.float32", "0", "a.py:1", -1, -1, False),
             ("all_gather", 8, "torch.bfloat16", "tp", "b.py:2", -1, 16, True),
             ("send", 4, "torch.int64", "tp", "a.py:1", 1, -1, False),
             ("all_reduce", 8, "torch.float64", "0", "", -1, -1, False),  # as float32
             ("recv", 4, "int32", "tp", "c.py:3", 0, -1, False)]
    for op, count, dtype, group, site, peer, out, async_op in calls:
        slow.complete(slow.start(op, -1, count, dtype, group, site, peer, out, async_op))
        complete(start(code.op_code(op), count, code.dtype_code(dtype), fast.group_id(group),
                       fast.site_id(site), peer, out, async_op))
    slow.start("barrier")
    start(code.op_code("barrier"), 0, code.dtype_code("float32"), 0, fast.site_id(""), -1, -1,
          0)
    unstable = {"time_created_ns", "time_discovered_started_ns",
                "time_discovered_completed_ns", "duration_ms", "thread_id", "thread_name"}

    def entries(fr):
        return [{k: v for k, v in e.items() if k not in unstable}
                for e in json.loads(fr.dump_string())["entries"]]
    assert entries(fast) == entries(slow)
    assert [e["state"] for e in entries(fast)] == ["completed"] * 5 + ["started"]
    assert fast.oldest_pending()[1:] == ("barrier", 3, "")  # group 0: 3rd collective
    with pytest.raises(ValueError, match="bad code"):
        start(code.op_code("send"), 1, 0, 7, 0, 0, -1, False)  # no group 7
    with pytest.raises(ValueError, match="bad code"):
        start(99, 1, 0, 0, 0, 0, -1, False)
    with pytest.raises(TypeError, match="8 positional"):
        start(0, 1)
    with pytest.raises(TypeError):
        complete("x")
    with pytest.raises(_core.Error, match="unknown op"):
        code.op_code("all_reduse")
    with pytest.raises(_core.Error, match="'pp'"):
        fast.group_id("pp")
    # The builtins keep their recorder alive.
    del fast
    complete(start(0, 1, 0, 0, 0, -1, -1, False))


# --- import order with torch -----------------------------------------------------------

@pytest.mark.parametrize("order", ["import torch; import trainscope",
                                   "import trainscope; import torch"])
def test_import_order_with_torch(order):
    pytest.importorskip("torch")
    code = (order + "; import trainscope._core as c; t = torch.ones(4);"
            " import torch.distributed as dist;"
            " print(c.version(), float(t.sum()), dist.is_available())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=ENV, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[1] == "4.0"


def test_library_calls_leave_the_process_alone(tmp_path):
    # The real dispositions (sigaction, not Python's table) of SIGBUS and SIGPIPE, and
    # stderr: a scan through a memory mapping (the reader used to install a SIGBUS handler)
    # and the analyses change no signal and print nothing, even with progress forced on.
    code = """
import ctypes, signal, sys, trainscope._api as api
libc = ctypes.CDLL(None, use_errno=True)
def disposition(sig):
    buf = ctypes.create_string_buffer(256)  # struct sigaction; sa_handler comes first
    assert libc.sigaction(int(sig), None, buf) == 0
    return int.from_bytes(buf.raw[:8], 'little')
sigs = (signal.SIGBUS, signal.SIGPIPE, signal.SIGSEGV)
before = [disposition(s) for s in sigs]
api.data_scan(sys.argv[1], threads=2, mmap=True, fail_on='none')
api.diagnose(sys.argv[2])
after = [disposition(s) for s in sigs]
assert before == after, (before, after)
"""
    env = dict(ENV, TRAINSCOPE_PROGRESS="1")
    env.pop("TRAINSCOPE_NO_PROGRESS")
    p = subprocess.run([sys.executable, "-c", code, os.path.join(DATA, "data", "small.jsonl"),
                        os.path.join(DATA, "diagnose", "duplicate_data.csv")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "" and p.stdout == ""


def test_lock_run_dir_one_writer_per_run_directory(tmp_path):
    # The C++ lock (core/run_dir_lock.h) that watch / record / checkpoint.save take: a second
    # descriptor is refused naming the holder, the same job joins, release() frees it.
    run = str(tmp_path / "run")
    held = _core.lock_run_dir(run, job_id="", command="writer one")
    assert held.holds and held.holder_pid == os.getpid()
    with open(os.path.join(run, "LOCK")) as f:
        assert f.read() == "pid %d\ncommand writer one\njob -\n" % os.getpid()
    with pytest.raises(trainscope.Error, match=r"is in use by pid %d \(writer one\); wait"
                       % os.getpid()):
        _core.lock_run_dir(run, job_id="")
    held.release()
    job = _core.lock_run_dir(run, job_id="launch/h/1")
    joined = _core.lock_run_dir(run, job_id="launch/h/1")
    assert job.holds and not joined.holds and joined.job_id == "launch/h/1"
    with pytest.raises(trainscope.Error, match="is in use by pid"):
        _core.lock_run_dir(run, job_id="launch/h/2")
    job.release()
    assert _core.lock_run_dir(run, job_id="").holds


def test_util_lock_run_dir_once_per_process(tmp_path, monkeypatch):
    from trainscope import _util
    for var in ("TRAINSCOPE_JOB_ID", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(var, raising=False)
    run = str(tmp_path / "run")
    first = _util.lock_run_dir(run)
    assert first.holds and _util.lock_run_dir(run + "/") is first  # watch, then save: one lock
    # A rank other than 0 of a world without a job id takes nothing (its rank 0 holds it).
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _util.lock_run_dir(str(tmp_path / "other")) is None
    assert not os.path.exists(str(tmp_path / "other" / "LOCK"))
