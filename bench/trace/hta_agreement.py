#!/usr/bin/env python3
"""Side-by-side HTA agreement: idle / compute / non-compute % of every trace in
HolisticTraceAnalysis' tests/data, as HTA computes them and as `trainscope trace analyze`
does (docs/metrics.md "HTA agreement").

Usage:
  bench/trace/hta_agreement.py HTA_CHECKOUT [--trainscope build/bin/trainscope]
      [--hta-python /usr/bin/python3] [--json out.json] [--markdown out.md]

HTA is run from the checkout itself (TraceAnalysis(trace_files={0: FILE}).get_temporal_breakdown
with its defaults, i.e. include_last_profiler_step=False) with a Python that can import pandas,
numpy and plotly (Debian: python3-pandas python3-plotly python3-networkx). When it cannot be run,
the figures that HTA's own tests expect are used where there are any, and the row says so.
Each trace is analysed as one rank (one file), by both tools.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

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
import json, logging, sys
sys.path.insert(0, sys.argv[1])
logging.disable(logging.CRITICAL)
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


def run_hta(python, hta_dir, path):
    try:
        p = subprocess.run([python, "-c", HTA_SNIPPET, hta_dir, path], capture_output=True,
                           text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    for line in p.stdout.splitlines():
        if line.startswith("HTA_RESULT "):
            return json.loads(line[len("HTA_RESULT "):])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:120]}


def run_ours(binary, path):
    p = subprocess.run([binary, "trace", "analyze", path, "--json"], capture_output=True,
                       text=True, timeout=600)
    if p.returncode not in (0, 1):
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:120]}
    doc = json.loads(p.stdout)
    if not doc.get("ranks") and doc.get("skipped"):
        return {"error": "skipped: " + doc["skipped"][0].get("reason", "")[:100]}
    b = doc["ranks"][0]["temporal_breakdown"]
    kt = b["kernel_time_us"]
    if not kt:
        return {"error": "no kernel time (basis %s)" % b["basis"]}
    # Percentages from the us figures (the JSON rounds the percentages to 0.01).
    return {"basis": b["basis"], "kernel_time_us": kt, "idle_pct": 100 * b["idle_us"] / kt,
            "compute_pct": 100 * b["compute_us"] / kt,
            "non_compute_pct": 100 * b["non_compute_us"] / kt}


def hta_can_run(python):
    try:
        return subprocess.run([python, "-c", "import pandas, numpy, plotly"],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hta", help="HolisticTraceAnalysis checkout")
    ap.add_argument("--trainscope", default="build/bin/trainscope")
    ap.add_argument("--hta-python", default="/usr/bin/python3")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--markdown", help="write the table as Markdown here")
    a = ap.parse_args()
    data = os.path.join(a.hta, "tests", "data")
    files = sorted(set(glob.glob(os.path.join(data, "**", "*.json"), recursive=True) +
                       glob.glob(os.path.join(data, "**", "*.json.gz"), recursive=True)))
    hta_ok = hta_can_run(a.hta_python)
    rows = []
    for f in files:
        rel = os.path.relpath(f, data)
        hta = run_hta(a.hta_python, a.hta, f) if hta_ok else {"error": "HTA not run"}
        source = "HTA run"
        if "error" in hta and rel in HTA_TEST_EXPECTS:
            e = HTA_TEST_EXPECTS[rel]
            hta = {"idle_pct": e[0], "compute_pct": e[1], "non_compute_pct": e[2]}
            source = "HTA test"
        ours = run_ours(a.trainscope, f)
        row = {"trace": rel, "hta_source": source, "hta": hta, "ours": ours}
        if "error" not in hta and "error" not in ours:
            row["max_diff_points"] = max(abs(hta[k] - ours[k])
                                         for k in ("idle_pct", "compute_pct", "non_compute_pct"))
        rows.append(row)
        print(fmt_row(row), flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"format": "trainscope.bench.hta_agreement", "version": 1,
                       "argv": sys.argv, "rows": rows}, fh, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write(markdown(rows))
    compared = [r for r in rows if "max_diff_points" in r]
    worst = max((r["max_diff_points"] for r in compared), default=0)
    print("%d traces, %d compared, worst difference %.3f points" % (len(rows), len(compared), worst))


def triple(d):
    if "error" in d:
        return "-"
    return "%.2f / %.2f / %.2f" % (d["idle_pct"], d["compute_pct"], d["non_compute_pct"])


def fmt_row(r):
    diff = "%.3f" % r["max_diff_points"] if "max_diff_points" in r else "-"
    note = r["hta"].get("error") or r["ours"].get("error") or ""
    return "%-80s %-24s %-24s %7s %s" % (r["trace"], triple(r["hta"]), triple(r["ours"]), diff, note)


def markdown(rows):
    out = ["| trace | HTA idle / compute / non-compute % | trainscope | max diff (points) | note |",
           "|---|---|---|---|---|"]
    for r in rows:
        diff = "%.3f" % r["max_diff_points"] if "max_diff_points" in r else "-"
        note = []
        if r["hta_source"] != "HTA run":
            note.append(r["hta_source"])
        if "error" in r["hta"]:
            note.append("HTA: " + r["hta"]["error"])
        if "error" in r["ours"]:
            note.append("trainscope: " + r["ours"]["error"])
        elif r["ours"].get("basis") not in (None, "device"):
            note.append("trainscope basis " + r["ours"]["basis"])
        out.append("| %s | %s | %s | %s | %s |" % (r["trace"], triple(r["hta"]),
                                                   triple(r["ours"]), diff, "; ".join(note)))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
