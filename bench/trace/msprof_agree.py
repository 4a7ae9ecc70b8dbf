#!/usr/bin/env python3
"""trainscope's Ascend cluster view against msprof-analyze, side by side on the same inputs.

For each sample of tests/data/trace/ascend_cluster (the two cluster_analysis_output folders and
the two folders of torch_npu rank folders, for which msprof-analyze `cluster` first builds its
output in a copy), it runs msprof-analyze (its cluster command where needed, its advisor's
SlowRankAnalyzer and SlowLinkAnalyzer) and `trainscope trace analyze --json`, and writes JSON
with the largest relative difference of the per rank and step figures, of the per-rank
SDMA/RDMA bandwidth, whether the named slow ranks agree, and the time ratio msprof-analyze /
trainscope (wall time of each tool's own reading of the same folder, best of --rounds).

Run: .venv/bin/python bench/trace/msprof_agree.py --binary build/bin/trainscope -o agree.json
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "trace", "ascend_cluster")
FIELDS = {"Computing": "computing_us", "Communication(Not Overlapped)": "communication_not_overlapped_us",
          "Overlapped": "overlapped_us", "Communication": "communication_us", "Free": "free_us",
          "Stage": "stage_us", "Bubble": "bubble_us", "Preparing": "preparing_us"}
CLI = ("import sys; from msprof_analyze.cli.entrance import msprof_analyze_cli; "
       "sys.argv = ['msprof-analyze'] + sys.argv[1:]; sys.exit(msprof_analyze_cli())")


def rel(a, b):
    m = max(abs(a), abs(b))
    return abs(a - b) / m if m > 1e-9 else 0.0


def step_of(s):
    s = str(s).strip().lower()
    s = s[4:] if s.startswith("step") else s
    return int(s) if s not in ("", "na", "n/a") else -1


def msprof_cluster(folder):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", CLI, "cluster", "-d", folder, "-m", "all"],
                   capture_output=True, text=True, timeout=300, check=True)
    return time.perf_counter() - t


def compare(name, advisor_dir, ours_path, binary, rounds):
    from msprof_analyze.advisor.analyzer.cluster.slow_link_analyzer import SlowLinkAnalyzer
    from msprof_analyze.advisor.analyzer.cluster.slow_rank_analyzer import SlowRankAnalyzer
    best = 1e9
    for _ in range(rounds):
        t = time.perf_counter()
        p = subprocess.run([binary, "trace", "analyze", ours_path, "--json"], capture_output=True,
                           text=True, timeout=120)
        best = min(best, time.perf_counter() - t)
    c = json.loads(p.stdout)["cluster"]
    with open(os.path.join(advisor_dir, "cluster_analysis_output", "cluster_step_trace_time.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["Type"] == "rank"]
    mine = {(r["step"], r["rank"]): r for r in c["rows"]}
    worst = 0.0
    for r in rows:
        m = mine[(step_of(r["Step"]), int(r["Index"]))]
        for col, key in FIELDS.items():
            if r.get(col) not in (None, "", "NA"):
                worst = max(worst, rel(float(r[col]), m[key]))
    a = SlowRankAnalyzer(advisor_dir)
    dims = {d["dimension"]: d for d in c["slow_rank"]["dimensions"]}
    agree = True
    for ours_dim, theirs in (("computing", a.COMPUTE), ("communication_not_overlapped", a.COMMUNICATION),
                             ("free", a.FREE)):
        g = a.get_global_step_rank(theirs)
        agree &= dims[ours_dim]["named"] == bool(g)
        if g:
            agree &= (dims[ours_dim]["max_rank"], dims[ours_dim]["min_rank"]) == \
                (g["maximum"]["rank_id"], g["minimum"]["rank_id"])
    link = SlowLinkAnalyzer(advisor_dir)
    bw = {(b["step"], b["rank"]): b for b in c["bandwidth"]}
    worst_bw = 0.0
    for key, v in link.rank_bw_dict.items():
        s, r = key.split("_")
        b = bw[(int(s), int(r))]
        worst_bw = max(worst_bw, rel(v[link.SDMA_BANDWIDTH], b["sdma_gbps"]),
                       rel(v[link.RDMA_BANDWIDTH], b["rdma_gbps"]))
    return {"input": name, "ranks": len(c["ranks"]), "rows": len(rows),
            "max_rel_diff_step_figures": worst, "max_rel_diff_bandwidth": worst_bw,
            "slow_ranks_agree": bool(agree), "trainscope_s": best}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "bin", "trainscope"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    import msprof_analyze  # noqa: F401  (fails clearly without it)
    from importlib.metadata import version
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("advisor8", "pp16"):
            shutil.copytree(os.path.join(DATA, name), os.path.join(tmp, name))
            results.append(compare(name, os.path.join(tmp, name), os.path.join(DATA, name),
                                   args.binary, args.rounds))
        for name in ("pp4_folders", "dp2_folders"):
            d = os.path.join(tmp, name)
            shutil.copytree(os.path.join(DATA, name), d)
            msprof_s = msprof_cluster(d)
            r = compare(name, d, os.path.join(DATA, name), args.binary, args.rounds)
            r["msprof_cluster_s"] = msprof_s
            r["time_ratio_msprof_over_trainscope"] = msprof_s / r["trainscope_s"]
            results.append(r)
    out = {"argv": sys.argv, "versions": {"msprof-analyze": version("msprof-analyze")},
           "results": results}
    text = json.dumps(out, indent=2)
    if args.output == "-":
        print(text)
    else:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    ok = all(r["max_rel_diff_step_figures"] <= 1e-3 and r["max_rel_diff_bandwidth"] <= 1e-3 and
             r["slow_ranks_agree"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
