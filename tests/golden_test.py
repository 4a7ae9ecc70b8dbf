#!/usr/bin/python3
"""Golden CLI test runner: one case file = one command line and its expected result.

A case is JSON:
  {
    "args": ["env", "diff", "{data}/env/a.json", "{data}/env/b.json", "--json"],
    "exit_code": 1,
    "stdout_json": {...},          # expected stdout parsed as JSON (after "ignore"), or
    "stdout_file": "x.expected.json", # the same, kept beside the case file
    "stdout_contains": ["text", ...],  # substrings stdout must contain
    "stderr_contains": ["text", ...],  # substrings stderr must contain
    "ignore": ["host.kernel", "results.*.time_us"],  # JSON paths dropped before comparing
    "tolerance": {"loss_end": 1e-4},  # JSON paths whose numbers may differ by this much (abs)
    "asserts": ["0 < out['mfu'] <= 1"],  # Python expressions over the stdout JSON `out`
    "env": {"NAME": "value"},       # extra environment
    "timeout_s": 120,
    "setup": [["copy", "{data}/data/small.jsonl", "{tmp}/in.jsonl"], ...],  # before the run
    "signal": {"name": "SIGINT", "when": "{tmp}/spill/trainscope-data.*"},  # during the run
    "after": {"same_content": [["{tmp}/in.jsonl", "{data}/data/small.jsonl"]], ...},
    "reproducible": ["weights_checksum"]  # equal in a second run on this machine
  }
{data} expands to tests/data, {tmp} to a fresh temporary directory, {src} to the source root.
Set TS_GOLDEN_UPDATE=1 to rewrite stdout_file from the actual output.

setup steps (in order): ["copy", SRC, DST], ["repeat", SRC, DST, N] (N copies of SRC back
to back), ["write", DST, TEXT], ["write_hex", DST, HEX], ["mkdir", DIR] (with parents),
["symlink", TARGET, LINK] (TARGET verbatim, may be relative), ["hardlink", EXISTING, NEW],
["mkfifo", PATH], ["gzip", SRC, DST].
tolerance: each path (with "*" like ignore) must match numbers in both the actual and the
expected JSON, pairwise within the tolerance; the paths are then left out of the exact
comparison. asserts: each expression must be true on the parsed stdout (before "ignore"); it
may use abs, all, any, len, min, max, sum, math. Use them for figures that vary from run to
run (timings) but obey invariants that a wrong result breaks.
signal: once a file matching the glob "when" exists (checked every millisecond), the signal
"name" is sent to the command (a run that ends first fails the case unless its exit code is
the expected one; a command killed by signal S has exit code -S).
after: checks of the file system once the command ended: "same_content" [[A, B], ...] (A
and B have the same bytes), "absent" [GLOB, ...] (matches nothing), "exists" [PATH, ...],
"symlink" [[LINK, TARGET], ...] (LINK is still a symlink to TARGET), "gunzip_same_content"
[[GZ, B], ...] (GZ is gzip whose content is B's bytes).
reproducible: the command runs a second time (in a second fresh {tmp}, after the same setup);
each path must have the same value in both runs' stdout JSON. For figures that are bitwise
deterministic on one machine but not across machines (a float checksum: libtorch's kernels
differ between CPU generations), so they are left out of the comparison with the expected JSON.
"""
import argparse, glob, gzip, json, math, os, shutil, signal, subprocess, sys, tempfile, time


def run_setup(steps, subst):
    for step in steps:
        op, args = step[0], [subst(x) if isinstance(x, str) else x for x in step[1:]]
        if op == "copy":
            shutil.copyfile(args[0], args[1])
        elif op == "repeat":
            with open(args[0], "rb") as f:
                data = f.read()
            with open(args[1], "wb") as f:
                for _ in range(int(args[2])):
                    f.write(data)
        elif op == "gzip":
            with open(args[0], "rb") as f, open(args[1], "wb") as raw:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as g:
                    g.write(f.read())
        elif op == "write":
            with open(args[0], "w") as f:
                f.write(args[1])
        elif op == "write_hex":
            with open(args[0], "wb") as f:
                f.write(bytes.fromhex(args[1]))
        elif op == "mkdir":
            os.makedirs(args[0], exist_ok=True)
        elif op == "symlink":
            os.symlink(step[1], args[1])  # the target verbatim (relative links stay relative)
        elif op == "hardlink":
            os.link(args[0], args[1])
        elif op == "mkfifo":
            os.mkfifo(args[0])
        else:
            raise ValueError(f"unknown setup step {op!r}")


def run_command(argv, env, timeout_s, sig):
    """subprocess.run, or with `sig` the signal sent once its "when" glob matches."""
    if not sig:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + timeout_s
    while p.poll() is None and time.monotonic() < deadline:
        if glob.glob(sig["when"]):
            p.send_signal(getattr(signal, sig["name"]))
            break
        time.sleep(0.001)
    try:
        out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def check_after(after, subst):
    failures = []
    for a, b in after.get("same_content", []):
        a, b = subst(a), subst(b)
        try:
            with open(a, "rb") as fa, open(b, "rb") as fb:
                if fa.read() != fb.read():
                    failures.append(f"{a} differs from {b}")
        except OSError as e:
            failures.append(f"cannot compare {a} with {b}: {e}")
    for a, b in after.get("gunzip_same_content", []):
        a, b = subst(a), subst(b)
        try:
            with gzip.open(a, "rb") as fa, open(b, "rb") as fb:
                if fa.read() != fb.read():
                    failures.append(f"{a} decompressed differs from {b}")
        except OSError as e:
            failures.append(f"cannot decompress {a} and compare with {b}: {e}")
    for g in after.get("absent", []):
        left = glob.glob(subst(g))
        if left:
            failures.append(f"left behind: {left}")
    for path in after.get("exists", []):
        if not os.path.lexists(subst(path)):
            failures.append(f"missing: {subst(path)}")
    for link, target in after.get("symlink", []):
        link = subst(link)
        if not os.path.islink(link):
            failures.append(f"{link} is no longer a symlink")
        elif os.readlink(link) != target:
            failures.append(f"{link} points at {os.readlink(link)}, expected {target}")
    return failures


def drop(obj, path):
    head, _, rest = path.partition(".")
    targets = []
    if isinstance(obj, dict):
        targets = list(obj.keys()) if head == "*" else ([head] if head in obj else [])
        if not rest:
            for k in targets:
                obj.pop(k, None)
            return
        for k in targets:
            drop(obj[k], rest)
    elif isinstance(obj, list):
        idx = range(len(obj)) if head == "*" else ([int(head)] if head.isdigit() and int(head) < len(obj) else [])
        for i in idx:
            if rest:
                drop(obj[i], rest)


def select(obj, path):
    """The values at `path` ("a.*.b"; "*" = every key or element), in document order."""
    head, _, rest = path.partition(".")
    if isinstance(obj, dict):
        keys = list(obj.keys()) if head == "*" else ([head] if head in obj else [])
        items = [obj[k] for k in keys]
    elif isinstance(obj, list):
        items = obj if head == "*" else ([obj[int(head)]] if head.isdigit() and int(head) < len(obj) else [])
    else:
        items = []
    if not rest:
        return items
    return [v for item in items for v in select(item, rest)]


def check_tolerance(actual, expected, tolerance):
    failures = []
    for path, tol in tolerance.items():
        a, e = select(actual, path), select(expected, path)
        if not a or len(a) != len(e):
            failures.append(f"{path}: {len(a)} actual values, {len(e)} expected")
            continue
        for x, y in zip(a, e):
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
                failures.append(f"{path}: not numbers: {x!r} vs {y!r}")
            elif not abs(x - y) <= tol:
                failures.append(f"{path}: {x!r} differs from the expected {y!r} by more than {tol}")
        drop(actual, path)
        drop(expected, path)
    return failures


def check_asserts(out, asserts):
    env = {"__builtins__": {}, "abs": abs, "all": all, "any": any, "len": len, "min": min,
           "max": max, "sum": sum, "math": math, "out": out}
    failures = []
    for expr in asserts:
        try:
            ok = eval(expr, env)  # the case file is part of the test suite
        except Exception as e:  # a missing key is a failure, not a crash
            failures.append(f"assert {expr!r} raised {type(e).__name__}: {e}")
            continue
        if not ok:
            failures.append(f"assert {expr!r} is false")
    return failures


def check_reproducible(binary, case, env, first_stdout):
    tmp2 = tempfile.mkdtemp(prefix="ts_golden_again_")
    subst = lambda s: s.replace("{data}", os.path.join(SRC, "tests", "data")).replace("{tmp}", tmp2).replace("{src}", SRC)
    run_setup(case.get("setup", []), subst)
    p = run_command([binary] + [subst(x) for x in case["args"]], env, case.get("timeout_s", 120), None)
    try:
        first, second = json.loads(first_stdout), json.loads(p.stdout)
    except json.JSONDecodeError as e:
        return [f"reproducible: stdout is not JSON: {e}"]
    failures = []
    for path in case["reproducible"]:
        a, b = select(first, path), select(second, path)
        if not a or a != b:
            failures.append(f"{path} differs between two runs on this machine: {a} vs {b}")
    shutil.rmtree(tmp2, ignore_errors=True)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--case", required=True)
    a = ap.parse_args()
    case_dir = os.path.dirname(os.path.abspath(a.case))
    with open(a.case) as f:
        case = json.load(f)
    # The source root: TS_SOURCE_DIR (set by ctest), else the directory above tests/.
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.environ.get("TS_SOURCE_DIR", os.path.dirname(here))
    global SRC
    SRC = src
    tmp = tempfile.mkdtemp(prefix="ts_golden_")
    subst = lambda s: s.replace("{data}", os.path.join(src, "tests", "data")).replace("{tmp}", tmp).replace("{src}", src)
    argv = [a.binary] + [subst(x) for x in case["args"]]
    env = dict(os.environ)
    env.update({k: subst(v) for k, v in case.get("env", {}).items()})
    run_setup(case.get("setup", []), subst)
    sig = case.get("signal")
    if sig:
        sig = dict(sig, when=subst(sig["when"]))
    p = run_command(argv, env, case.get("timeout_s", 120), sig)
    failures = check_after(case.get("after", {}), subst)
    if p.returncode != case.get("exit_code", 0):
        failures.append(f"exit code {p.returncode}, expected {case.get('exit_code', 0)}")
    for s in case.get("stdout_contains", []):
        if subst(s) not in p.stdout:
            failures.append(f"stdout lacks {s!r}")
    for s in case.get("stderr_contains", []):
        if subst(s) not in p.stderr:
            failures.append(f"stderr lacks {s!r}")
    expected = case.get("stdout_json")
    if "stdout_file" in case:
        path = os.path.join(case_dir, case["stdout_file"])
        if os.environ.get("TS_GOLDEN_UPDATE") == "1":
            actual = json.loads(p.stdout)
            for path_ in case.get("ignore", []):
                drop(actual, path_)
            with open(path, "w") as f:
                json.dump(actual, f, indent=2, sort_keys=True)
                f.write("\n")
        with open(path) as f:
            expected = json.load(f)
    if expected is not None or case.get("asserts"):
        try:
            actual = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            failures.append(f"stdout is not JSON: {e}")
            actual = None
        if actual is not None:
            failures += check_asserts(actual, case.get("asserts", []))
        if actual is not None and expected is not None:
            failures += check_tolerance(actual, expected, case.get("tolerance", {}))
            for path_ in case.get("ignore", []):
                drop(actual, path_)
                drop(expected, path_)
            if actual != expected:
                failures.append("stdout JSON differs:\n  expected " + json.dumps(expected, sort_keys=True)[:2000]
                                + "\n  actual   " + json.dumps(actual, sort_keys=True)[:2000])
    if case.get("reproducible"):
        failures += check_reproducible(a.binary, case, env, p.stdout)
    if failures:
        print("FAILED", a.case, "\n  " + " ".join(argv))
        for f in failures:
            print("  -", f)
        print("--- stdout ---\n" + p.stdout[-3000:] + "\n--- stderr ---\n" + p.stderr[-3000:])
        print("(files kept in " + tmp + ")")
        return 1
    print("ok", a.case)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
