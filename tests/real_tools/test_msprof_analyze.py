"""`trainscope trace analyze` against msprof-analyze (the venv's, PyPI) on Huawei's own samples.

Inputs (tests/data/trace/ascend_cluster, provenance in tests/data/README.md):
- advisor8: the 8-rank cluster_analysis_output of msprof-analyze's advisor test resources;
- pp16: msinsight's 16-rank, 2-stage pipeline cluster_analysis_output;
- pp4_folders: msinsight's four torch_npu rank folders (PP 2 x DP 2): msprof-analyze `cluster`
  builds its cluster_analysis_output from them here, trainscope reads the rank folders.

For each, msprof-analyze's own code gives the figures and trainscope must agree:
- per rank and step Computing, Communication(Not Overlapped), Overlapped, Communication, Free,
  Stage, Bubble, Preparing (cluster_step_trace_time.csv rank rows) and the stage rows, to 0.1 %;
- the advisor's slow-rank rule (SlowRankAnalyzer): which dimensions are a bottleneck, and the
  max / min ranks it names per dimension, globally and per stage;
- the advisor's slow-link rule (SlowLinkAnalyzer): SDMA and RDMA bandwidth per (step, rank) to
  0.1 % and the rank it names;
- per link (src -> dst, transport) bandwidth of cluster_communication_matrix.json, and per rank
  the wait ratio of msprof's "Total Op Info" records, to 0.1 %.
Skipped without msprof-analyze. Run: TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest
-q tests/real_tools/test_msprof_analyze.py
"""
import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cli import run_json  # noqa: E402

msprof = pytest.importorskip("msprof_analyze")
DATA = os.path.join(REPO, "tests", "data", "trace", "ascend_cluster")
REL = 1e-3  # 0.1 %
FIELDS = {"Computing": "computing_us", "Communication(Not Overlapped)": "communication_not_overlapped_us",
          "Overlapped": "overlapped_us", "Communication": "communication_us", "Free": "free_us",
          "Stage": "stage_us", "Bubble": "bubble_us", "Preparing": "preparing_us"}


def close(a, b, abs_tol=1e-4):
    return abs(a - b) <= max(REL * max(abs(a), abs(b)), abs_tol)


def step_of(s):
    s = str(s).strip().lower()
    s = s[4:] if s.startswith("step") else s
    return int(s) if s not in ("", "na", "n/a") else -1


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """name -> (the folder msprof-analyze's advisor reads, what trainscope reads)."""
    tmp = tmp_path_factory.mktemp("msprof")
    out = {}
    for name in ("advisor8", "pp16"):
        shutil.copytree(os.path.join(DATA, name), tmp / name)
        out[name] = (str(tmp / name), os.path.join(DATA, name))
    folders = tmp / "pp4_folders"
    shutil.copytree(os.path.join(DATA, "pp4_folders"), folders)
    cli = ("import sys; from msprof_analyze.cli.entrance import msprof_analyze_cli; "
           "sys.argv = ['msprof-analyze'] + sys.argv[1:]; sys.exit(msprof_analyze_cli())")
    p = subprocess.run([sys.executable, "-c", cli, "cluster", "-d", str(folders), "-m", "all"],
                       capture_output=True, text=True, timeout=120)
    assert os.path.exists(folders / "cluster_analysis_output" / "cluster_step_trace_time.csv"), \
        p.stdout[-2000:] + p.stderr[-2000:]
    out["pp4_folders"] = (str(folders), os.path.join(DATA, "pp4_folders"))
    return out


@pytest.fixture(scope="module")
def ours(inputs):
    res = {}
    for name, (_, path) in inputs.items():
        _, j = run_json("trace", "analyze", path)
        res[name] = j
    return res


def msprof_rows(folder):
    with open(os.path.join(folder, "cluster_analysis_output", "cluster_step_trace_time.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", ["advisor8", "pp16", "pp4_folders"])
def test_step_figures(inputs, ours, name):
    rows = msprof_rows(inputs[name][0])
    c = ours[name]["cluster"]
    mine = {(r["step"], r["rank"]): r for r in c["rows"]}
    theirs = [r for r in rows if r["Type"] == "rank"]
    assert len(mine) == len(theirs) > 0
    for r in theirs:
        m = mine[(step_of(r["Step"]), int(r["Index"]))]
        for col, key in FIELDS.items():
            if col in r and r[col] not in ("", "NA"):
                assert close(float(r[col]), m[key]), (name, r["Index"], col, r[col], m[key])
    stages = {(s["step"], tuple(s["ranks"])): s for s in c["stage_rows"]}
    theirs = [r for r in rows if r["Type"] == "stage"]
    assert len(stages) == len(theirs)
    for r in theirs:
        ranks = tuple(sorted(int(x) for x in r["Index"].strip("()").split(",")))
        s = stages[(step_of(r["Step"]), ranks)]
        for col, key in FIELDS.items():
            if col in r and r[col] not in ("", "NA"):
                assert close(float(r[col]), s[key]), (name, ranks, col)
    assert len(ours[name]["ranks"]) == len({int(r["Index"]) for r in rows if r["Type"] == "rank"})


@pytest.mark.parametrize("name", ["advisor8", "pp16", "pp4_folders"])
def test_slow_rank(inputs, ours, name):
    from msprof_analyze.advisor.analyzer.cluster.slow_rank_analyzer import SlowRankAnalyzer
    a = SlowRankAnalyzer(inputs[name][0])
    c = ours[name]["cluster"]["slow_rank"]
    dims = {d["dimension"]: d for d in c["dimensions"]}
    data = list(a.step_trace_dict.values())
    mean_total = sum(sum(v) for v in data) / len(data)
    for i, (ours_dim, theirs_dim) in enumerate([("computing", SlowRankAnalyzer.COMPUTE),
                                                ("communication_not_overlapped", SlowRankAnalyzer.COMMUNICATION),
                                                ("free", SlowRankAnalyzer.FREE)]):
        flagged = a.compute_max_gap_ratio([v[i] for v in data], mean_total) > a.RATIO_THRESHOLD
        assert dims[ours_dim]["flagged"] == flagged, (name, ours_dim)
        g = a.get_global_step_rank(theirs_dim)
        assert dims[ours_dim]["named"] == bool(g), (name, ours_dim)
        if g:
            assert (dims[ours_dim]["max_rank"], dims[ours_dim]["min_rank"]) == \
                (g["maximum"]["rank_id"], g["minimum"]["rank_id"]), (name, ours_dim, g)
        per_stage = a.get_stage_step_rank(theirs_dim)
        for k, st in enumerate(c["stages"]):
            d = {x["dimension"]: x for x in st["dimensions"]}[ours_dim]
            want = per_stage.get(f"stage-{k}")
            assert d["named"] == bool(want), (name, k, ours_dim)
            if want:
                assert (d["max_rank"], d["min_rank"]) == \
                    (want["maximum"]["rank_id"], want["minimum"]["rank_id"])
    # The advisor's wording names each bottleneck dimension (Chinese by default).
    a.process()
    for dim, word in (("computing", "计算"), ("communication_not_overlapped", "通信"), ("free", "空闲")):
        assert (f"集群中的{word}有问题" in a.bottelneck) == dims[dim]["flagged"]


def test_slow_card_of_the_8_rank_cluster(inputs, ours):
    """The advisor schedules its slow-card analysis on the rank of maximum free time; the rank
    of least communication is the one the others wait for: both rank 1, and so is ours."""
    from msprof_analyze.advisor.analyzer.cluster.slow_rank_analyzer import SlowRankAnalyzer
    a = SlowRankAnalyzer(inputs["advisor8"][0])
    slow = a.get_global_step_rank(SlowRankAnalyzer.FREE)["maximum"]["rank_id"]
    j = ours["advisor8"]
    assert len(j["ranks"]) == 8
    assert j["cluster"]["slow_rank"]["rank"] == slow == 1
    assert any(f["code"] == "slow_rank" and f["rank"] == slow for f in j["findings"])


def test_pipeline_bubble_of_the_waiting_stage(ours):
    j = ours["pp16"]
    assert len(j["ranks"]) == 16
    stages = j["cluster"]["stages"]
    waiting = max(stages, key=lambda s: s["bubble_pct"])
    assert waiting["ranks"] == list(range(8, 16)) and waiting["bubble_pct"] > 40
    assert any(f["code"] == "pipeline_bubble" and "(8, 9, 10, 11, 12, 13, 14, 15)" in f["what"]
               for f in j["findings"])


@pytest.mark.parametrize("name", ["advisor8", "pp16", "pp4_folders"])
def test_slow_link(inputs, ours, name):
    from msprof_analyze.advisor.analyzer.cluster.slow_link_analyzer import SlowLinkAnalyzer
    a = SlowLinkAnalyzer(inputs[name][0])
    c = ours[name]["cluster"]
    mine = {(b["step"], b["rank"]): b for b in c["bandwidth"]}
    assert len(mine) == len(a.rank_bw_dict) > 0
    for key, bw in a.rank_bw_dict.items():
        step, rank = key.split("_")
        m = mine[(int(step), int(rank))]
        assert close(bw[a.SDMA_BANDWIDTH], m["sdma_gbps"]), (name, key)
        assert close(bw[a.RDMA_BANDWIDTH], m["rdma_gbps"]), (name, key)
    for t in ("SDMA", "RDMA"):
        g = a.get_global_step_rank(t)
        assert c["slow_link_rank"][t]["slow"] == bool(g), (name, t)
        if g:
            assert c["slow_link_rank"][t]["min_rank"] == g["minimum"]["rank_id"]


@pytest.mark.parametrize("name", ["pp16", "pp4_folders"])
def test_links_and_wait(inputs, ours, name):
    out = os.path.join(inputs[name][0], "cluster_analysis_output")
    with open(os.path.join(out, "cluster_communication_matrix.json")) as f:
        matrix = json.load(f)
    links = {}
    for steps in matrix.values():
        for ops in steps.values():
            total = [k for k in ops if k.startswith("Total Op Info")]
            kind = [k for k in ops if "-total@" in k or k.endswith("-total")]
            for op in total or kind or list(ops):
                for sd, v in ops[op].items():
                    s, d = sd.split("-")
                    e = links.setdefault((v["Transport Type"], int(s), int(d)), [0.0, 0.0])
                    e[0] += v["Transit Size(MB)"]
                    e[1] += v["Transit Time(ms)"]
    c = ours[name]["cluster"]
    if name == "pp4_folders":  # per-rank matrices name group-local ranks: links need msprof's
        links = {}
    assert c["links_total"] == len(links)
    for l in c["links"]:
        size, time = links[(l["transport"], l["src"], l["dst"])]
        assert close(size, l["size_mb"]) and close(time, l["time_ms"], 1e-3), (name, l)
    with open(os.path.join(out, "cluster_communication.json")) as f:
        comm = json.load(f)
    wait = {}
    for steps in comm.values():
        for ops in steps.values():
            total = any(op.startswith("Total Op Info") for op in ops)
            for op, ranks in ops.items():
                if op.startswith("Total Op Info") != total:
                    continue
                for r, rec in ranks.items():
                    e = wait.setdefault(int(r), [0.0, 0.0])
                    e[0] += rec["Communication Time Info"]["Wait Time(ms)"]
                    e[1] += rec["Communication Time Info"]["Transit Time(ms)"]
    mine = {w["rank"]: w for w in c["wait"]}
    assert set(mine) == set(wait)
    for r, (w, t) in wait.items():
        assert close(w / (w + t) if w + t else 0, mine[r]["wait_ratio"]), (name, r)
