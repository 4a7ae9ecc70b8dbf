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
    "env": {"NAME": "value"},       # extra environment
    "timeout_s": 120
  }
{data} expands to tests/data, {tmp} to a fresh temporary directory, {src} to the source root.
Set TS_GOLDEN_UPDATE=1 to rewrite stdout_file from the actual output.
"""
import argparse, json, os, subprocess, sys, tempfile


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
    tmp = tempfile.mkdtemp(prefix="ts_golden_")
    subst = lambda s: s.replace("{data}", os.path.join(src, "tests", "data")).replace("{tmp}", tmp).replace("{src}", src)
    argv = [a.binary] + [subst(x) for x in case["args"]]
    env = dict(os.environ)
    env.update({k: subst(v) for k, v in case.get("env", {}).items()})
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=case.get("timeout_s", 120))
    failures = []
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
    if expected is not None:
        try:
            actual = json.loads(p.stdout)
        except json.JSONDecodeError as e:
            failures.append(f"stdout is not JSON: {e}")
            actual = None
        if actual is not None:
            for path_ in case.get("ignore", []):
                drop(actual, path_)
                drop(expected, path_)
            if actual != expected:
                failures.append("stdout JSON differs:\n  expected " + json.dumps(expected, sort_keys=True)[:2000]
                                + "\n  actual   " + json.dumps(actual, sort_keys=True)[:2000])
    if failures:
        print("FAILED", a.case, "\n  " + " ".join(argv))
        for f in failures:
            print("  -", f)
        print("--- stdout ---\n" + p.stdout[-3000:] + "\n--- stderr ---\n" + p.stderr[-3000:])
        return 1
    print("ok", a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
