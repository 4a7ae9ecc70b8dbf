#!/usr/bin/python3
"""The report shows what the user logged (issue 33 part 3), as a user's own script meets it: a
plain PyTorch loop with `trainscope.watch`, `mon.log(loss=..., accuracy=...)` inside the steps,
`mon.log(step=s, val_loss=...)` after every 5th step, `trainscope.checkpoint.save` every 10th,
and a torch.profiler window written with tensorboard_trace_handler into <run>/profiler. Then:

- the metrics file holds the accuracy in the step records and the val_loss in `scalars` records;
- `watch` wrote TensorBoard files (train/tb/rank0/), read back with tensorboard's own reader
  when the package is importable: the trainer's tags and the user's, one value per step;
- `trainscope report RUN --json` lists the scalars, the checkpoint marks (10, 20, 30) and the
  profiler trace, analysed without a manual `trace analyze`;
- the page in headless Chromium draws a chart per extra scalar (accuracy), the validation loss
  on the loss chart, the checkpoint markers at their steps and the profiler section; a second
  run whose loss turns NaN at step 6 has step 6 on its loss chart's axis with its marker.

Screenshots: --artifacts/report_scalars.png and report_scalars_nan.png. Skips (exit 77) only
when chromium, chromedriver or selenium is not installed.
"""
import argparse, glob, json, os, shutil, subprocess, sys, tempfile, textwrap, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_browser_test import SKIP, browser_skip_reason, headless_chrome, png_stats  # noqa: E402

USER_SCRIPT = textwrap.dedent('''
    import os, sys
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    import trainscope
    import trainscope.checkpoint

    run_dir, nan_at = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.2)
    x = torch.randn(512, 8)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    xv, yv = x[448:], y[448:]
    mon = trainscope.watch(net, opt, run_dir=run_dir)
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                   on_trace_ready=tensorboard_trace_handler(os.path.join(run_dir, "profiler")))
    prof.start()
    for step in range(1, 31):
        with mon.step(tokens=32):
            i = (step * 32) % 448
            xb, yb = x[i:i + 32], y[i:i + 32]
            if step == nan_at:
                xb = xb * float("nan")
            out = net(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mon.log(loss=loss, accuracy=(out.argmax(1) == yb).float().mean())
        prof.step()
        if step % 5 == 0:  # an evaluation after the step
            with torch.no_grad():
                mon.log(step=step, val_loss=F.cross_entropy(net(xv), yv))
        if step % 10 == 0:
            trainscope.checkpoint.save(run_dir, {"model": net.state_dict()}, step=step)
    prof.stop()
    mon.close()
''')


def run(argv, timeout_s, env=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)


def user_run(a, tmp, name, nan_at, problems):
    run_dir = os.path.join(tmp, name)
    script = os.path.join(tmp, "train_user.py")
    with open(script, "w") as f:
        f.write(USER_SCRIPT)
    p = run([a.python, script, run_dir, str(nan_at)], a.timeout)
    if nan_at == 0 and p.returncode != 0:
        raise SystemExit(f"FAIL: the user's script exited {p.returncode}: {p.stderr[-1500:]}")
    if nan_at and "NonFiniteError" not in p.stderr:
        problems.append(f"{name}: no NonFiniteError at step {nan_at}: {p.stderr[-800:]}")
    # A `trainscope compare --json` report saved in the run (compare/): drawn as its section.
    os.makedirs(os.path.join(run_dir, "compare"), exist_ok=True)
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "report",
                             "compare_run", "compare", "lr5_vs_base.json"),
                os.path.join(run_dir, "compare"))
    return run_dir


def check_files(run_dir, problems):
    recs = [json.loads(line) for line in open(os.path.join(run_dir, "train", "metrics.rank0.jsonl"))]
    acc = [r for r in recs if r["type"] == "step" and "accuracy" in r.get("scalars", {})]
    val = [r["step"] for r in recs if r["type"] == "scalars" and "val_loss" in r["scalars"]]
    if len(acc) != 30 or val != [5, 10, 15, 20, 25, 30]:
        problems.append(f"metrics: {len(acc)} steps with accuracy, val_loss records at {val}")
    events = glob.glob(os.path.join(run_dir, "train", "tb", "rank0", "events.out.tfevents.*"))
    if len(events) != 1:
        problems.append(f"TensorBoard: {events} under train/tb/rank0 (want one event file)")
        return
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:  # the file is there; its content is tb_test's and diagnose's business
        print("tensorboard not importable: event file checked for presence only", flush=True)
        return
    acc_ = event_accumulator.EventAccumulator(events[0], size_guidance={"scalars": 0})
    acc_.Reload()
    tags = acc_.Tags()["scalars"]
    for tag, n in (("train/loss", 30), ("train/step_ms", 30), ("accuracy", 30), ("val_loss", 6)):
        got = [e.step for e in acc_.Scalars(tag)] if tag in tags else []
        if len(got) != n:
            problems.append(f"TensorBoard tag {tag}: {len(got)} values (want {n}); tags {tags}")
    print(f"TensorBoard: {len(tags)} tags in {os.path.basename(events[0])}", flush=True)


def check_summary(summary, problems):
    if not {"accuracy", "val_loss"} <= set(summary.get("scalars", [])):
        problems.append(f"--json scalars: {summary.get('scalars')}")
    steps = [c["step"] for c in summary.get("checkpoints", []) if c["complete"]]
    if steps != [10, 20, 30]:
        problems.append(f"--json checkpoints: {summary.get('checkpoints')}")
    prof = [t for t in summary.get("traces", []) if t["source"] == "profiler"]
    if len(prof) != 1 or prof[0]["file"] != "profiler" or prof[0]["trace_files"] < 1:
        problems.append(f"--json traces: {summary.get('traces')}")
    for s in ("loss", "val_loss", "scalars", "trace", "compare"):
        if s not in summary["sections"]:
            problems.append(f"section {s} not drawn: {summary['sections']}")
    if "phases" in summary["sections"]:  # the loop never calls mon.phase: all phases are zero
        problems.append(f"an all-zero phases chart is drawn: {summary['sections']}")


def load(driver, html, problems):
    driver.get("file://" + os.path.abspath(html))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not driver.execute_script("return !!window.tsReport"):
        time.sleep(0.1)
    if not driver.execute_script("return !!window.tsReport"):
        problems.append(f"{html}: the page never rendered")
        return False
    return True


# Per chart (data-chart): coloured pixels of its drawn canvas, its x range, its markers and
# the labels of its series.
CHARTS_JS = """
return (window.tsReport.charts || []).map(function (g) {
  var box = g.graphDiv.closest('[data-chart]'), c = g.hidden_;
  var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = 0;
  for (var i = 0; i < d.length; i += 4) {
    var mx = Math.max(d[i], d[i+1], d[i+2]), mn = Math.min(d[i], d[i+1], d[i+2]);
    if (d[i+3] > 0 && mx - mn > 50) n++;
  }
  return {chart: box.getAttribute('data-chart'), coloured: n, x: g.xAxisRange(),
          labels: g.getLabels().slice(1),
          marks: Array.from(box.querySelectorAll('.ts-marker')).map(function (m) {
            return [m.dataset.kind, Number(m.dataset.step)]; })};
});"""


def screenshot(driver, png, problems):
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(height, 1000), 12000))
    time.sleep(0.5)
    driver.save_screenshot(png)
    w, h, colours = png_stats(png)
    print(f"screenshot {png}: {w}x{h}, {colours} colours", flush=True)
    if colours < 64:
        problems.append(f"screenshot {png} looks blank ({colours} colours)")


def check_page(driver, html, png, problems):
    if not load(driver, html, problems):
        return
    charts = {c["chart"]: c for c in driver.execute_script(CHARTS_JS)}
    print("charts: " + ", ".join(sorted(charts)), flush=True)
    acc = charts.get("scalar:accuracy")
    if acc is None or acc["coloured"] < 30 or acc["x"][1] < 30:
        problems.append(f"no drawn accuracy chart over steps 1-30: {acc}")
    loss = charts.get("loss", {"labels": [], "marks": []})
    if not any("validation" in lab for lab in loss["labels"]):
        problems.append(f"val_loss not on the loss chart: {loss['labels']}")
    ckpt = sorted(s for k, s in loss["marks"] if k == "checkpoint")
    if ckpt != [10, 20, 30]:
        problems.append(f"checkpoint markers on the loss chart at {ckpt} (want 10, 20, 30)")
    if "val_loss" in [c.split(":", 1)[-1] for c in charts if c.startswith("scalar:")]:
        problems.append("val_loss drawn twice (its own chart and the loss chart's)")
    cmp = driver.execute_script(
        "var s = document.querySelector('#sec-compare'); return s ? s.textContent : ''")
    if "compare (compare/lr5_vs_base.json)" not in cmp or "part at step 13" not in cmp or \
            "compare.loss_divergence" not in cmp:
        problems.append(f"no compare section with the runs' divergence: {cmp[:300]!r}")
    title = driver.execute_script(
        "var h = document.querySelector('#sec-trace h2'); return h ? h.textContent : ''")
    if "profiler traces (profiler)" not in title:
        problems.append(f"no profiler trace section (trace heading {title!r})")
    for e in driver.get_log("browser"):
        if e.get("level") in ("SEVERE", "WARNING"):
            problems.append(f"console: {e.get('level')} {e.get('message')}")
    screenshot(driver, png, problems)


def check_nan_page(driver, html, png, nan_at, problems):
    if not load(driver, html, problems):
        return
    charts = {c["chart"]: c for c in driver.execute_script(CHARTS_JS)}
    loss = charts.get("loss")
    if loss is None or loss["x"][1] < nan_at:
        problems.append(f"NaN run: the loss chart's axis stops before step {nan_at}: {loss}")
        return
    # Every step curve (loss, lr, grad_norm, the logged accuracy) reaches the non-finite step and
    # carries its marker, not only the loss chart.
    curves = {n: c for n, c in charts.items() if n in ("loss", "lr", "grad_norm") or n.startswith("scalar:")}
    for name, c in sorted(curves.items()):
        kinds = {k for k, s in c["marks"] if s == nan_at}
        if c["x"][1] < nan_at or not kinds & {"nonfinite", "first_nonfinite", "nan"}:
            problems.append(f"NaN run: chart {name} has no non-finite marker at step {nan_at}: "
                            f"x {c['x']}, marks {c['marks']}")
    if len(curves) < 3:
        problems.append(f"NaN run: only the step charts {sorted(curves)}")
    screenshot(driver, png, problems)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--python", default=sys.executable, help="with torch and trainscope")
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    if (why := browser_skip_reason()) is not None:
        print(f"SKIP: {why}")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="ts_report_scalars_")
    problems = []
    os.makedirs(a.artifacts, exist_ok=True)
    try:
        run_dir = user_run(a, tmp, "user-run", 0, problems)
        nan_dir = user_run(a, tmp, "nan-run", 6, problems)
        check_files(run_dir, problems)
        pages = {}
        for d in (run_dir, nan_dir):
            html = os.path.join(d, "report.html")
            p = run([a.binary, "report", d, "-o", html, "--json"], a.timeout)
            if p.returncode != 0:
                problems.append(f"report {d} exited {p.returncode}: {p.stderr[-800:]}")
                continue
            pages[d] = html
            if d == run_dir:
                summary = json.loads(p.stdout)
                print(f"report --json: scalars {summary.get('scalars')}, checkpoints "
                      f"{[c['step'] for c in summary.get('checkpoints', [])]}, traces "
                      f"{summary.get('traces')}", flush=True)
                check_summary(summary, problems)
                shutil.copy(html, os.path.join(a.artifacts, "report_scalars.html"))
        driver = headless_chrome()
        try:
            if run_dir in pages:
                check_page(driver, pages[run_dir],
                           os.path.join(a.artifacts, "report_scalars.png"), problems)
            if nan_dir in pages:
                check_nan_page(driver, pages[nan_dir],
                               os.path.join(a.artifacts, "report_scalars_nan.png"), 6, problems)
        finally:
            driver.quit()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("  " + p, flush=True)
    print("PASSED" if not problems else "FAILED", flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
