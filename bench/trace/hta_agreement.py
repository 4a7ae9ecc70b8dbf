#!/usr/bin/env python3
"""Side-by-side HTA agreement: idle / compute / non-compute % of every trace in
HolisticTraceAnalysis' tests/data, as HTA computes them and as `trainscope trace analyze`
does (docs/metrics.md "HTA agreement").

Usage:
  bench/trace/hta_agreement.py HTA_CHECKOUT [--trainscope build/bin/trainscope]
      [--hta-python .venv/bin/python] [--json out.json] [--markdown out.md]
      [--only SUBSTRING ...] [--repeat N]   (N interleaved runs of both tools, best wall each)
      [--hta-installed]   (the HTA that --hta-python imports, e.g. .venv/bin/python's pip
                           HolisticTraceAnalysis, instead of the checkout's code)

HTA is run from the checkout itself (TraceAnalysis(trace_files={0: FILE}).get_temporal_breakdown
with its defaults, i.e. include_last_profiler_step=False) with a Python that can import pandas,
numpy and plotly (Debian: python3-pandas python3-plotly python3-networkx); with --hta-installed
the checkout gives only tests/data and HTA is the package that Python has installed. When it
cannot be run, the figures that HTA's own tests expect are used where there are any, and the row
says so. Each trace is analysed as one rank (one file), by both tools. The JSON names the HTA,
pandas and numpy versions used.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

# What HTA's own tests expect (tests/test_trace_analysis.py), idle/compute/non-compute %.
HTA_TEST_EXPECTS = {
    "mtia_trace_single_rank/mtia_rank_0.json.gz": (
        100 * 5648827.0 / 13328347, 100 * 7305596.0 / 13328347, 100 * 373924.0 / 13328347),
    "vision_transformer/rank-0.json.gz": (
        100 * 552069 / 2033570, 100 * 596651 / 2033570, 100 * 884850 / 2033570),
    "vision_transformer/rank-1.json.gz": (
        100 * 431771 / 2032757, 100 * 596759 / 2032757, 100 * 1004227 / 2032757),
}

HTA_SNIPPET = r"""
import json, logging, sys, warnings
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
logging.disable(logging.CRITICAL)
warnings.simplefilter("ignore")
if len(sys.argv) > 2 and sys.argv[2] == "--versions":
    import numpy, pandas
    from hta.version import __version_tuple__
    print("HTA_VERSIONS " + json.dumps({"hta": ".".join(map(str, __version_tuple__)),
                                        "pandas": pandas.__version__, "numpy": numpy.__version__}))
    sys.exit(0)
from hta.configs.config import logger
logger.setLevel(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
out = {}
try:
    t = TraceAnalysis(trace_files={0: sys.argv[2]}, trace_dir="")
    df = t.get_temporal_breakdown(visualize=False)
    r = df.iloc[0]
    kt = float(r["kernel_time(us)"])
    out = {"kernel_time_us": kt,
           "idle_pct": 100 * float(r["idle_time(us)"]) / kt,
           "compute_pct": 100 * float(r["compute_time(us)"]) / kt,
           "non_compute_pct": 100 * float(r["non_compute_time(us)"]) / kt}
except Exception as e:  # HTA refuses the file (not a trace, no device events, ...)
    out = {"error": type(e).__name__ + ": " + str(e).splitlines()[0][:100] if str(e) else type(e).__name__}
print("HTA_RESULT " + json.dumps(out))
"""


def run_timed(argv):
    """Runs argv; returns (CompletedProcess, wall s, peak RSS in MB or None) of that process."""
    timer = ["/usr/bin/time", "-f", "TS_MAXRSS_KB %M"] if os.path.exists("/usr/bin/time") else []
    t0 = time.monotonic()
    p = subprocess.run(timer + argv, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    rss, err = None, []
    for line in p.stderr.splitlines():
        if line.startswith("TS_MAXRSS_KB "):
            rss = int(line.split()[1]) / 1024
        else:
            err.append(line)
    return subprocess.CompletedProcess(argv, p.returncode, p.stdout, "\n".join(err)), wall, rss


def run_hta(python, hta_dir, path):
    try:
        p, wall, rss = run_timed([python, "-c", HTA_SNIPPET, hta_dir, path])
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    for line in p.stdout.splitlines():
        if line.startswith("HTA_RESULT "):
            r = json.loads(line[len("HTA_RESULT "):])
            r["wall_s"], r["peak_rss_mb"] = wall, rss
            return r
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:120]}


def run_ours(binary, path):
    p, wall, rss = run_timed([binary, "trace", "analyze", path, "--json"])
    if p.returncode not in (0, 1):
        lines = p.stderr.strip().splitlines() or ["exit %d" % p.returncode]
        errors = [l for l in lines if "error:" in l]
        return {"error": (errors or lines)[0].split("error: ", 1)[-1][:120]}
    doc = json.loads(p.stdout)
    if not doc.get("ranks") and doc.get("skipped"):
        return {"error": "skipped: " + doc["skipped"][0].get("reason", "")[:100]}
    b = doc["ranks"][0]["temporal_breakdown"]
    kt = b["kernel_time_us"]
    if not kt:
        return {"error": "no kernel time (basis %s)" % b["basis"]}
    # Percentages from the us figures (the JSON rounds the percentages to 0.01).
    return {"basis": b["basis"], "kernel_time_us": kt, "wall_s": wall, "peak_rss_mb": rss,
            "idle_pct": 100 * b["idle_us"] / kt,
            "compute_pct": 100 * b["compute_us"] / kt,
            "non_compute_pct": 100 * b["non_compute_us"] / kt}


def hta_can_run(python, installed):
    try:
        return subprocess.run([python, "-c", "import pandas, numpy, plotly" +
                               (", hta" if installed else "")],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def hta_versions(python, hta_dir):
    """{"hta", "pandas", "numpy"} versions of the HTA that run_hta runs, or {}."""
    try:
        p = subprocess.run([python, "-c", HTA_SNIPPET, hta_dir, "--versions"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    for line in p.stdout.splitlines():
        if line.startswith("HTA_VERSIONS "):
            return json.loads(line[len("HTA_VERSIONS "):])
    return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hta", help="HolisticTraceAnalysis checkout")
    ap.add_argument("--trainscope", default="build/bin/trainscope")
    ap.add_argument("--hta-python", default=sys.executable)
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--markdown", help="write the table as Markdown here")
    ap.add_argument("--only", action="append", default=[],
                    help="only traces whose path contains this (repeatable)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run both tools N times, interleaved, and keep each one's best wall time")
    ap.add_argument("--hta-installed", action="store_true",
                    help="run the HTA package that --hta-python has installed, not the checkout's")
    a = ap.parse_args()
    hta_code = "" if a.hta_installed else a.hta
    data = os.path.join(a.hta, "tests", "data")
    files = sorted(set(glob.glob(os.path.join(data, "**", "*.json"), recursive=True) +
                       glob.glob(os.path.join(data, "**", "*.json.gz"), recursive=True)))
    hta_ok = hta_can_run(a.hta_python, a.hta_installed)
    versions = hta_versions(a.hta_python, hta_code) if hta_ok else {}
    rows = []
    # Traces HTA's tests use that the checkout lacks (large files left out of a snapshot).
    for rel, e in sorted(HTA_TEST_EXPECTS.items()):
        if a.only and not any(o in rel for o in a.only):
            continue
        if not os.path.exists(os.path.join(data, rel)):
            rows.append({"trace": rel, "hta_source": "HTA test",
                         "hta": {"idle_pct": e[0], "compute_pct": e[1], "non_compute_pct": e[2]},
                         "ours": {"error": "file not in the checkout"}})
    if a.only:
        files = [f for f in files if any(o in os.path.relpath(f, data) for o in a.only)]
    for f in files:
        rel = os.path.relpath(f, data)
        hta, ours = {"error": "HTA not run"}, None
        for _ in range(max(1, a.repeat)):
            h = run_hta(a.hta_python, hta_code, f) if hta_ok else {"error": "HTA not run"}
            o = run_ours(a.trainscope, f)
            if "wall_s" in hta and "wall_s" in h:
                h["wall_s"] = min(h["wall_s"], hta["wall_s"])
            if ours is not None and "wall_s" in ours and "wall_s" in o:
                o["wall_s"] = min(o["wall_s"], ours["wall_s"])
            hta, ours = h, o
        source = "HTA run"
        if "error" in hta and rel in HTA_TEST_EXPECTS:
            e = HTA_TEST_EXPECTS[rel]
            hta = {"idle_pct": e[0], "compute_pct": e[1], "non_compute_pct": e[2]}
            source = "HTA test"
        row = {"trace": rel, "hta_source": source, "hta": hta, "ours": ours}
        if source == "HTA run" and rel in HTA_TEST_EXPECTS:
            row["hta_test_expects"] = HTA_TEST_EXPECTS[rel]
        if "error" not in hta and "error" not in ours:
            row["max_diff_points"] = max(abs(hta[k] - ours[k])
                                         for k in ("idle_pct", "compute_pct", "non_compute_pct"))
        rows.append(row)
        print(fmt_row(row), flush=True)
    rows.sort(key=lambda r: r["trace"])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"format": "trainscope.bench.hta_agreement", "version": 1,
                       "argv": sys.argv, "versions": versions, "rows": rows}, fh, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write(markdown(rows))
    compared = [r for r in rows if "max_diff_points" in r]
    worst = max((r["max_diff_points"] for r in compared), default=0)
    print("%d traces, %d compared, worst difference %.3f points (HTA %s)" %
          (len(rows), len(compared), worst, versions or "not run"))


def triple(d):
    if "error" in d:
        return "-"
    return "%.2f / %.2f / %.2f" % (d["idle_pct"], d["compute_pct"], d["non_compute_pct"])


def fmt_row(r):
    diff = "%.3f" % r["max_diff_points"] if "max_diff_points" in r else "-"
    note = r["hta"].get("error") or r["ours"].get("error") or ""
    return "%-80s %-24s %-24s %7s %s" % (r["trace"], triple(r["hta"]), triple(r["ours"]), diff, note)


def markdown(rows):
    out = ["| trace | HTA idle / compute / non-compute % | trainscope | max diff (points) | "
           "HTA s / trainscope s | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        speed = "-"
        if "wall_s" in r["hta"] and "wall_s" in r["ours"]:
            speed = "%.2f / %.3f" % (r["hta"]["wall_s"], r["ours"]["wall_s"])
        diff = "%.3f" % r["max_diff_points"] if "max_diff_points" in r else "-"
        note = []
        if r["hta_source"] != "HTA run":
            note.append(r["hta_source"])
        if "hta_test_expects" in r:
            note.append("HTA's test expects %.2f / %.2f / %.2f (delta 0.01)" %
                        tuple(r["hta_test_expects"]))
        if "error" in r["hta"]:
            note.append("HTA: " + r["hta"]["error"])
        if "error" in r["ours"]:
            note.append("trainscope: " + r["ours"]["error"])
        elif r["ours"].get("basis") not in (None, "device"):
            note.append("trainscope basis " + r["ours"]["basis"])
        out.append("| %s | %s | %s | %s | %s | %s |" % (r["trace"], triple(r["hta"]),
                                                        triple(r["ours"]), diff, speed,
                                                        "; ".join(note)))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
