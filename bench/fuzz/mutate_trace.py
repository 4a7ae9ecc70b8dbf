#!/usr/bin/python3
"""Mutation loop for the trace readers: damaged copies of tests/data/trace through the real CLI.

Each mutant is a fixture (Chrome trace, phase log, torch_npu CSV) with seeded damage: byte flips,
inserts, deletes, truncation, and field splices (the value of "ts", "dur", "pid", "tid", "cat",
"correlation", "step", ... or a CSV cell replaced by 1e309, -1, 2^64, {}, [], "x", ...). It runs
`trainscope trace analyze MUTANT --json` and fails when the exit code is not 0, 1 or 2, when
stderr shows an uncaught exception or a sanitizer report, or when the run times out.

  bench/fuzz/mutate_trace.py --binary build/bin/trainscope [--count 500] [--seed 1] [--keep DIR]
Exit 1 when a mutant failed (kept under --keep DIR when given).
"""
import argparse, glob, os, random, re, shutil, subprocess, sys, tempfile

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALUES = [b"1e309", b"-1e309", b"-1", b"0", b"1.5", b"18446744073709551616",
          b"-9223372036854775809", b"99999999999999999999999", b"{}", b"[]", b"null", b"true",
          b"\"x\"", b"\"\"", b"\"nan\"", b"\"\\ud800\"", b"\xff\xfe", b"NaN", b"inf", b"4294967296"]
KEYS = rb'"(ts|dur|pid|tid|cat|ph|name|id|args|correlation|External id|stream|Stream Id|step|' \
       rb'rank|world_size|phases_ms|forward_ms|step_ms|traceEvents|distributedInfo)"\s*:\s*'
BAD_STDERR = ("terminate called", "AddressSanitizer", "UndefinedBehaviorSanitizer",
              "runtime error:", "LeakSanitizer", "internal error")


def fixtures():
    pats = ["*.json", "phases/*.jsonl", "ascend/**/*.csv", "ascend/**/trace_view.json"]
    out = []
    for p in pats:
        out += glob.glob(os.path.join(SRC, "tests/data/trace", p), recursive=True)
    return sorted(p for p in set(out) if os.path.getsize(p) < 1 << 20)


def value_end(data, i):
    """End of the JSON value (or CSV cell) starting at i, roughly: enough to splice over."""
    if i < len(data) and data[i:i + 1] in (b"{", b"["):
        depth = 0
        for j in range(i, len(data)):
            c = data[j:j + 1]
            depth += c in (b"{", b"[")
            depth -= c in (b"}", b"]")
            if depth == 0:
                return j + 1
        return len(data)
    m = re.compile(rb'"(?:[^"\\\n]|\\.)*"|[^,}\]\n]*').match(data, i)
    return m.end() if m else i


def mutate(data, rng, csv):
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.45:  # splice a field's value (or a CSV cell)
            if csv:
                cells = [m.start() for m in re.finditer(rb"(?:^|,|\n)", data)]
                if not cells:
                    continue
                i = rng.choice(cells)
                i += i < len(data) and data[i:i + 1] in (b",", b"\n")
            else:
                keys = [m.end() for m in re.finditer(KEYS, data)]
                if not keys:
                    continue
                i = rng.choice(keys)
            data[i:value_end(bytes(data), i)] = rng.choice(VALUES)
        elif kind < 0.65 and data:  # flip a byte
            data[rng.randrange(len(data))] = rng.choice(b"{}[]\",:\\\n -0123456789e.\xff\x00")
        elif kind < 0.8:  # insert a run
            i = rng.randrange(len(data) + 1)
            data[i:i] = rng.choice(VALUES + [b",", b"{", b"[", b"\"", b"\n"])
        elif kind < 0.93 and data:  # delete a run
            i = rng.randrange(len(data))
            del data[i:i + rng.randint(1, 16)]
        elif data:  # truncate
            del data[rng.randrange(len(data)):]
    return bytes(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(SRC, "build/bin/trainscope"))
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--keep", help="copy failing mutants here")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    files = fixtures()
    tmp = tempfile.mkdtemp(prefix="ts_mutate_trace_")
    codes, failures = {}, []
    try:
        for n in range(a.count):
            src = rng.choice(files)
            with open(src, "rb") as f:
                mutant = mutate(f.read(), rng, src.endswith(".csv"))
            # Keep the file name: the reader picks the format by it.
            d = os.path.join(tmp, str(n))
            os.makedirs(d)
            path = os.path.join(d, os.path.basename(src))
            with open(path, "wb") as f:
                f.write(mutant)
            try:
                p = subprocess.run([a.binary, "trace", "analyze", path, "--json"],
                                   capture_output=True, timeout=a.timeout,
                                   env=dict(os.environ, TRAINSCOPE_NO_PROGRESS="1"))
                rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            codes[rc] = codes.get(rc, 0) + 1
            bad = [s for s in BAD_STDERR if s in err]
            if rc not in (0, 1, 2) or bad:
                failures.append((src, rc, bad, err.strip().splitlines()[-1:]))
                if a.keep:
                    os.makedirs(a.keep, exist_ok=True)
                    shutil.copy(path, os.path.join(a.keep, f"{n}_{os.path.basename(src)}"))
            shutil.rmtree(d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{a.count} mutants of {len(files)} fixtures: exit codes {dict(sorted(codes.items(), key=str))}")
    for src, rc, bad, last in failures[:20]:
        print(f"FAIL {os.path.relpath(src, SRC)}: exit {rc} {bad} {last}")
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
