#!/usr/bin/python3
"""Runs trainscope's libFuzzer targets (fuzz/*.cc, built with -DTS_FUZZ=ON) for a bounded time.

Each target gets a seed corpus made from the test fixtures in tests/data (and configs/),
shaped the way its harness reads input (a leading selector byte, two files in one input),
and runs for --seconds under ASan/UBSan. A crash, leak, timeout or out-of-memory is a
finding: its input is kept under WORK/artifacts/ and the run exits 1.

  fuzz/run_fuzzers.py --build build-asan --seconds 20          # CI (scripts/test)
  fuzz/run_fuzzers.py --build build-asan --seconds 1800 --only npy_fuzzer   # longer
Reproduce a finding: build-asan/fuzz/<target> WORK/artifacts/<target>-crash-<sha>.
"""
import argparse, glob, os, shutil, subprocess, sys, time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(SRC, "tests", "data")


def read(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit)


def files(*patterns):
    out = []
    for p in patterns:
        out += sorted(glob.glob(os.path.join(SRC, p), recursive=True))
    return [f for f in out if os.path.isfile(f)]


def two(a, b):
    """Two files in one input, as fuzz_util.h SplitTwo reads them."""
    a = a[:0xFFFF]
    return bytes([len(a) >> 8, len(a) & 0xFF]) + a + b


def seeds(target):
    """Seed inputs of one target, as a list of bytes."""
    if target == "trace_chrome_fuzzer":
        return [read(f) for f in files("tests/data/trace/*.json", "tests/data/trace/phases/*.json")]
    if target == "trace_file_fuzzer":
        out = [b"\x00" + read(f) for f in files("tests/data/trace/phases/**/*.jsonl")]
        out += [b"\x01" + read(f) for f in files("tests/data/trace/ascend/**/step_trace_time.csv")]
        out += [b"\x02" + read(f) for f in files("tests/data/trace/ascend/**/kernel_details.csv")]
        out += [b"\x03" + read(f) for f in files("tests/data/trace/kineto_rank0.pt.trace.json")]
        # gzip'd traces: the byte source's inflate on SequentialFile chunks (trace/byte_source.cc)
        out += [b"\x03" + read(f) for f in files("tests/data/trace/**/*.json.gz")]
        return out
    if target == "trace_ascend_fuzzer":  # first byte: the file (fuzz/trace_ascend_fuzzer.cc kNames)
        names = ["kernel_details.csv", "step_trace_time.csv", "op_statistic.csv", "memory_record.csv",
                 "communication.json", "communication_matrix.json", "npu_module_mem.csv",
                 "ascend_pytorch_profiler_*.db"]
        return [bytes([i]) + read(f, 1 << 16) for i, n in enumerate(names)
                for f in files(f"tests/data/trace/ascend*/**/{n}")]
    if target == "ascend_cluster_fuzzer":  # first byte: 0 the CSV, 1 communication, 2 matrix
        d = "tests/data/trace/ascend_cluster/**/"
        return ([b"\x00" + read(f) for f in files(d + "cluster_step_trace_time.csv")] +
                [b"\x01" + read(f, 1 << 15) for f in files(d + "cluster_communication.json")] +
                [b"\x02" + read(f, 1 << 15) for f in files(d + "cluster_communication_matrix.json")])
    if target == "npy_fuzzer":
        return [read(f) for f in files("tests/data/**/*.npy")]
    if target == "safetensors_fuzzer":
        return [read(f) for f in files("tests/data/**/*.safetensors")]
    if target == "csv_fuzzer":
        return [read(f) for f in files("tests/data/**/*.csv")]
    if target == "megatron_index_fuzzer":
        out = []
        for idx in files("tests/data/**/*.idx"):
            binf = idx[:-4] + ".bin"
            out.append(two(read(idx), read(binf) if os.path.exists(binf) else b""))
        return out
    if target == "jsonl_scan_fuzzer":
        out = []
        for f in files("tests/data/data/*.jsonl", "tests/data/train/*.jsonl"):
            out += [b"\x00" + read(f, 1 << 14), b"\x01" + read(f, 1 << 14)]
        out += [b"\x02" + read(f, 1 << 14) for f in files("tests/data/data/*.txt")]
        return out
    if target == "fingerprint_fuzzer":
        return [read(f) for f in files("tests/data/env/fp_*.json", "tests/data/env/malformed.json")]
    if target == "train_config_fuzzer":
        return [read(f) for f in files("configs/*.json", "tests/data/train/*.json")]
    if target == "plan_config_fuzzer":  # the planner reads the trainer's configs
        return [read(f) for f in files("configs/*.json", "tests/data/plan/*.json",
                                       "tests/data/train/*.json")]
    if target == "hang_dump_fuzzer":  # two dumps of one case per input (SplitTwo)
        out = []
        for d in sorted(glob.glob(os.path.join(DATA, "hang", "*")) +
                        glob.glob(os.path.join(DATA, "hccl_fr", "*"))):  # + torch_npu's HCCL dumps
            rel = os.path.relpath(d, SRC)
            ranks = [read(f, 1 << 15) for f in files(f"{rel}/*")]
            if len(ranks) >= 2:
                out.append(two(ranks[0], ranks[1]))
        return out
    if target == "ckpt_manifest_fuzzer":  # manifest.json + model.safetensors (SplitTwo)
        out = []
        for step in sorted(glob.glob(os.path.join(DATA, "ckpt", "run", "checkpoints", "step-*"))):
            out.append(two(read(os.path.join(step, "manifest.json")),
                           read(os.path.join(step, "model.safetensors"))))
        out += [two(b"{}", read(f)) for f in files("tests/data/ckpt/**/*.safetensors")]
        return out
    if target == "tokenizer_json_fuzzer":  # tokenizer.json + a text (SplitTwo)
        text = read(os.path.join(DATA, "data", "small.jsonl"), 1 << 12)
        return [two(read(f), text) for f in files("tests/data/tokenizer/*.json")]
    if target == "pickle_fuzzer":  # Python's pickles, a DCP .metadata, FR dumps
        return [read(f) for f in files("tests/data/pickle/*.pkl", "tests/data/pickle/dcp/.metadata",
                                       "tests/data/pickle/fr_skipped/*",
                                       "tests/data/hang/pickle_*/*")]
    if target == "npu_smi_fuzzer":  # first byte: 0 the info table, 1 "Key : Value" (board, health)
        return [b"\x00" + read(f) for f in files("tests/data/env/npu_smi_*.txt")] + \
               [b"\x01" + read(f) for f in files("tests/data/env/npu_smi_board*.txt",
                                                  "tests/data/env/npu_smi_health*.txt")]
    if target == "topo_fuzzer":  # first byte: the tensor-parallel size (1 + b % 4); then the text
        return [bytes([tp]) + read(f) for f in files("tests/data/topo/*.txt") for tp in (1, 3)]
    if target == "diagnose_reader_fuzzer":  # selector byte = the format (fuzz/diagnose_reader_fuzzer.cc)
        d = "tests/data/diagnose/"
        out = [b"\x00" + read(f, 1 << 14) for f in files(d + "*.rundir/train/metrics.rank0.jsonl")]
        out += [b"\x01" + read(f, 1 << 14) for f in files(d + "*.jsonl")]
        out += [b"\x02" + read(f, 1 << 14) for f in files(d + "*.csv")]
        out += [b"\x03" + read(f, 1 << 14) for f in files(d + "*/trainer_state.json")]
        out += [b"\x04" + read(f, 1 << 14) for f in files(d + "*.tb/*tfevents*")]
        out += [b"\x05" + read(f, 1 << 14) for f in files(d + "*.megatron.log")]
        return out
    if target == "dcp_chunk_fuzzer":  # torch.save archives, as DCP stores each entry
        return [read(f) for f in files("fuzz/seeds/dcp_chunk/*.pt")]
    if target == "slurm_env_fuzzer":  # selector byte: 0 host list, 1 tasks per node
        return [b"\x00" + h for h in (b"node[01-04,07],login1", b"rack[1-2]-gpu[1-2]", b"localhost")] + \
               [b"\x01" + t for t in (b"2(x3),1", b"8", b"4(x2)")]
    if target == "store_message_fuzzer":  # request frames, written by comm_test's StoreFuzzSeedsTest
        return [read(f) for f in files("fuzz/seeds/store_message/*")]
    if target == "compare_dump_fuzzer":  # msprobe dump.json files (whole, cut, MindSpore's)
        return [read(f, 1 << 16) for f in files("fuzz/seeds/compare_dump/*.json")]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(SRC, "build-asan"), help="build dir with fuzz/")
    ap.add_argument("--seconds", type=int, default=20, help="time per target")
    ap.add_argument("--only", default="", help="comma-separated target names")
    ap.add_argument("--work", default="", help="corpora and findings (default: BUILD/fuzz-work)")
    a = ap.parse_args()
    bindir = os.path.join(a.build, "fuzz")
    targets = sorted(t for t in os.listdir(bindir) if t.endswith("_fuzzer")) if os.path.isdir(bindir) else []
    if a.only:
        want = a.only.split(",")
        missing = [t for t in want if t not in targets]
        if missing:
            print(f"run_fuzzers: no such target(s) in {bindir}: {', '.join(missing)}", file=sys.stderr)
            return 2
        targets = want
    if not targets:
        print(f"run_fuzzers: no fuzz targets in {bindir} (configure with -DTS_FUZZ=ON)", file=sys.stderr)
        return 2
    work = a.work or os.path.join(a.build, "fuzz-work")
    os.makedirs(os.path.join(work, "artifacts"), exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:allocator_may_return_null=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    passed, failed = 0, []
    print(f"{'target':<24} {'seeds':>5} {'runs':>9} {'cov':>6} {'corpus':>6} {'s':>5}  result")
    for t in targets:
        seed_dir = os.path.join(work, "seeds", t)
        corpus = os.path.join(work, "corpus", t)
        shutil.rmtree(seed_dir, ignore_errors=True)
        os.makedirs(seed_dir)
        os.makedirs(corpus, exist_ok=True)
        s = seeds(t)
        for i, data in enumerate(s):
            with open(os.path.join(seed_dir, f"seed{i:03d}"), "wb") as f:
                f.write(data)
        log = os.path.join(work, f"{t}.log")
        cmd = [os.path.join(bindir, t), corpus, seed_dir, f"-max_total_time={a.seconds}",
               "-timeout=25", "-rss_limit_mb=3072", "-max_len=65536", "-print_final_stats=1",
               f"-artifact_prefix={os.path.join(work, 'artifacts', t)}-"]
        t0 = time.time()
        with open(log, "w") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                timeout=a.seconds + 300).returncode
        text = open(log, errors="replace").read()
        stat = {}
        for line in text.splitlines():
            if line.startswith("stat::"):
                k, _, v = line[6:].partition(":")
                stat[k.strip()] = v.strip()
        cov = "?"
        for line in reversed(text.splitlines()):
            if " cov: " in line:
                cov = line.split(" cov: ")[1].split()[0]
                break
        ok = rc == 0
        result = "ok" if ok else f"FINDING (exit {rc}), log {log}"
        print(f"{t:<24} {len(s):>5} {stat.get('number_of_executed_units', '?'):>9} {cov:>6} "
              f"{len(os.listdir(corpus)):>6} {time.time() - t0:>5.0f}  {result}", flush=True)
        if ok:
            passed += 1
        else:
            failed.append(t)
            lines = [l for l in text.splitlines() if "ERROR" in l or "SUMMARY" in l or "Test unit written" in l
                     or "#0 " in l or "#1 " in l or "#2 " in l or "#3 " in l]
            for l in lines[:12]:
                print("    " + l)
    print(f"fuzz: {passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
