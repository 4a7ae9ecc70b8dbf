#!/usr/bin/env python3
"""Validation loss in the trainer (issue 31 part 3), end to end on real runs made here.

  * overfit: the training corpus is duplicate-heavy (2 documents repeated 100 times each) and
    the validation text (eval.corpus) is 20 other documents of the same alphabet. The model
    memorises the 2 documents: its training loss falls while its validation loss rises. The
    metrics file has val_loss on exactly the evaluated steps (every eval.every_steps and the
    last), the TensorBoard event file the same values under val/loss (read by the tensorboard
    package), summary.json its "eval" block, `trainscope report --json` a val_loss section
    (and, when Chromium is installed, the page's loss chart a dashed validation series with
    every point), and `trainscope diagnose RUN --json` says overfitting.
  * control: one corpus of 600 distinct documents from one word list, 10% of the documents
    held out (eval.fraction): training and validation loss fall together, diagnose does not
    say overfitting.
  * data parallel: 2 ranks x micro_batch 4 (`trainscope launch -n 2`) against 1 rank x 8 for 30
    steps: both ranks write the same val_loss, within fp32 noise of the single rank's (the
    ranks evaluate halves of the same sequences and all-reduce).

Corpora are generated from fixed seeds; each run is ~300 steps of a 2-layer width-64 model on
2 threads (a few seconds each).
"""
import argparse
import glob
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

STEPS = 300
EVERY = 15
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def write_jsonl(path, docs):
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")


def config(corpus, eval_section):
    return {"format": "trainscope.train_config", "version": 1,
            "model": {"layers": 2, "heads": 4, "width": 64, "seq_len": 32},
            "data": {"corpus": corpus, "num_workers": 1},
            "eval": eval_section,
            "optim": {"lr": 0.01, "min_lr": 0.003, "warmup_steps": 20, "weight_decay": 0.0},
            "train": {"steps": STEPS, "micro_batch": 8, "seed": 1, "threads": 2,
                      "log_every": 0, "layer_norms_every": 0}}


def make_inputs(tmp):
    rng = random.Random(5)
    alphabet = LETTERS + "     "

    def random_doc(n):
        return "".join(rng.choice(alphabet) for _ in range(n))

    repeated = [random_doc(150) for _ in range(2)]
    write_jsonl(os.path.join(tmp, "dup.jsonl"), repeated * 100)
    write_jsonl(os.path.join(tmp, "dup_val.jsonl"), [random_doc(150) for _ in range(20)])
    rng = random.Random(9)
    words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 7))) for _ in range(40)]
    write_jsonl(os.path.join(tmp, "same.jsonl"),
                [" ".join(rng.choice(words) for _ in range(30)) for _ in range(600)])
    paths = {}
    for name, cfg in (("overfit", config("dup.jsonl", {"corpus": "dup_val.jsonl",
                                                       "every_steps": EVERY, "batches": 4})),
                      ("control", config("same.jsonl", {"fraction": 0.1, "every_steps": EVERY,
                                                        "batches": 4}))):
        paths[name] = os.path.join(tmp, name + ".json")
        with open(paths[name], "w") as f:
            json.dump(cfg, f, indent=1)
    return paths


def train(binary, cfg, run_dir):
    p = subprocess.run([binary, "train", "--config", cfg, "--run-dir", run_dir, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"train exited {p.returncode}: {p.stderr[-2000:]}"
    return json.loads(p.stdout)


def steps_of(run_dir):
    out = []
    with open(os.path.join(run_dir, "train", "metrics.rank0.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["type"] == "step":
                out.append(j)
    return out


def diagnose(binary, run_dir):
    p = subprocess.run([binary, "diagnose", run_dir, "--json"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode in (0, 1), f"diagnose exited {p.returncode}: {p.stderr[-2000:]}"
    rep = json.loads(p.stdout)
    runs = [r for r in rep["runs"] if r.get("format") == "trainscope_metrics"]
    assert len(runs) == 1, rep["runs"]
    return runs[0], [f["id"] for f in rep["findings"]]


def check_metrics(run_dir, result):
    steps = steps_of(run_dir)
    assert len(steps) == STEPS, len(steps)
    want = [s for s in range(1, STEPS + 1) if s % EVERY == 0 or s == STEPS]
    got = [s["step"] for s in steps if "val_loss" in s]
    assert got == want, f"val_loss at steps {got}, expected {want}"
    vals = [s["val_loss"] for s in steps if "val_loss" in s]
    assert all(isinstance(v, float) and math.isfinite(v) for v in vals), vals
    assert all(s["eval_ms"] > 0 for s in steps if "val_loss" in s)
    assert not any("eval_ms" in s for s in steps if "val_loss" not in s)
    ev = result["eval"]
    assert ev["evaluations"] == len(want), ev
    assert abs(ev["val_loss_last"] - vals[-1]) < 1e-12, ev
    assert abs(ev["val_loss_min"] - min(vals)) < 1e-12, ev
    assert ev["val_loss_min_step"] == want[vals.index(min(vals))], ev
    with open(os.path.join(run_dir, "train", "summary.json")) as f:
        assert json.load(f)["eval"] == ev
    return steps, want, vals


def check_tensorboard(run_dir, want, vals):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    files = glob.glob(os.path.join(run_dir, "train", "tb", "rank0", "events.out.tfevents.*"))
    assert len(files) == 1, files
    acc = EventAccumulator(files[0], size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "val/loss" in tags and "train/loss" in tags, tags
    ev = acc.Scalars("val/loss")
    assert [e.step for e in ev] == want, [e.step for e in ev]
    for e, v in zip(ev, vals):
        assert abs(e.value - v) <= 1e-6 * max(1.0, abs(v)), (e.step, e.value, v)
    assert len(acc.Scalars("train/loss")) == STEPS


def check_report(binary, run_dir, tmp, npoints):
    html = os.path.join(tmp, "overfit.html")
    p = subprocess.run([binary, "report", run_dir, "-o", html, "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    sections = json.loads(p.stdout)["sections"]
    assert "loss" in sections and "val_loss" in sections, sections
    if not (os.path.exists("/usr/bin/chromium") and os.path.exists("/usr/bin/chromedriver")):
        print("report page: not rendered (no chromium/chromedriver)")
        return
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("report page: not rendered (no selenium)")
        return
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get("file://" + os.path.abspath(html))
        info = None
        for _ in range(100):
            info = driver.execute_script("""
              if (!window.tsReport) return null;
              var g = window.tsReport.charts.filter(function (c) {
                return c.graphDiv.closest('[data-chart]').getAttribute('data-chart') === 'loss';
              })[0];
              if (!g) return {labels: []};
              var labels = g.getLabels(), col = labels.findIndex(function (l) {
                return / validation$/.test(l); });
              var n = 0;
              for (var r = 0; col > 0 && r < g.numRows(); ++r) if (g.getValue(r, col) !== null) ++n;
              return {labels: labels, title: g.getOption('title'), points: n,
                      dashed: col > 0 && !!g.getOption('strokePattern', labels[col])};""")
            if info is not None:
                break
            time.sleep(0.1)
        assert info and len(info["labels"]) == 3, info  # step, training, validation
        assert info["points"] == npoints and info["dashed"], info
        print(f"report page: loss chart {info['title']!r}, series {info['labels'][1:]}, "
              f"{info['points']} validation points")
    finally:
        driver.quit()


def check_data_parallel(binary, cfg_path, tmp):
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["train"].update({"steps": 30, "threads": 1})
    cfg["eval"]["every_steps"] = 10
    one, two = os.path.join(tmp, "dp1.json"), os.path.join(tmp, "dp2.json")
    with open(one, "w") as f:
        json.dump(cfg, f)
    cfg["train"]["micro_batch"] = 4
    with open(two, "w") as f:
        json.dump(cfg, f)
    train(binary, one, os.path.join(tmp, "dp1"))
    p = subprocess.run([binary, "launch", "-n", "2", "--no-bind-cpus", "--run-dir",
                        os.path.join(tmp, "dp2"), "--", binary, "train", "--config", two],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"launch exited {p.returncode}: {p.stderr[-2000:]}"

    def vals(run_dir, rank):
        path = os.path.join(run_dir, "train", f"metrics.rank{rank}.jsonl")
        with open(path) as f:
            recs = [json.loads(line) for line in f]
        return [(r["step"], r["val_loss"]) for r in recs if r["type"] == "step" and "val_loss" in r]

    v1, r0, r1 = vals(os.path.join(tmp, "dp1"), 0), vals(os.path.join(tmp, "dp2"), 0), \
        vals(os.path.join(tmp, "dp2"), 1)
    assert [s for s, _ in v1] == [10, 20, 30] and r0 == r1, (v1, r0, r1)
    for (s, a), (_, b) in zip(v1, r0):
        assert abs(a - b) <= 1e-4 * abs(a), (s, a, b)
    print(f"data parallel: val_loss 1 rank {[round(v, 5) for _, v in v1]}, "
          f"2 ranks {[round(v, 5) for _, v in r0]} (both ranks)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ts_val_") as tmp:
        cfgs = make_inputs(tmp)
        # Overfitting: duplicate-heavy training text, other text for validation.
        run_dir = os.path.join(tmp, "overfit")
        result = train(a.binary, cfgs["overfit"], run_dir)
        steps, want, vals = check_metrics(run_dir, result)
        assert result["corpus"]["documents"] == 200 and result["eval"]["documents"] == 20
        check_tensorboard(run_dir, want, vals)
        check_report(a.binary, run_dir, tmp, len(want))
        run, findings = diagnose(a.binary, run_dir)
        print(f"overfit: loss {result['loss_start']:.3f} -> {result['loss_end']:.3f}, val_loss "
              f"min {min(vals):.3f} at step {result['eval']['val_loss_min_step']} -> "
              f"{vals[-1]:.3f}; diagnose: class {run['curve']['class']}, findings {findings}")
        assert run["val_points"] == len(want), run
        assert run["curve"]["class"] == "overfitting", run["curve"]
        assert "curve.overfitting" in findings, findings
        # Control: train and validation from one distribution (a held-out 10% of documents).
        run_dir = os.path.join(tmp, "control")
        result = train(a.binary, cfgs["control"], run_dir)
        steps, want, vals = check_metrics(run_dir, result)
        assert result["eval"]["documents"] == 60 and result["corpus"]["documents"] == 540, result
        run, findings = diagnose(a.binary, run_dir)
        print(f"control: loss {result['loss_start']:.3f} -> {result['loss_end']:.3f}, val_loss "
              f"{vals[0]:.3f} -> {vals[-1]:.3f}; diagnose: class {run['curve']['class']}, "
              f"findings {findings}")
        assert vals[-1] < vals[0] - 0.2, vals  # validation learns too: the control is not idle
        assert run["val_points"] == len(want), run
        assert run["curve"]["class"] != "overfitting", run["curve"]
        assert "curve.overfitting" not in findings, findings
        check_data_parallel(a.binary, cfgs["control"], tmp)
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())
