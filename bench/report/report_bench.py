#!/usr/bin/python3
"""`trainscope report` on a big metrics file (issue 17: 1M metric lines -> a page under 10 MB
that draws in under 2 s). Writes a synthetic trainscope metrics file of --lines step records
(one loss spike), times `trainscope report` beside `wc -l` of the same file (the machine's
line-reading speed, so the figure is a ratio), then loads the page in headless Chromium and
reads the page's own drawing time (window.tsReport.render_ms) and the load-to-drawn wall time.
Prints one JSON object: argv, versions, figures.

  bench/report/report_bench.py --binary build/bin/trainscope [--lines 1000000]
"""
import argparse, json, math, os, random, shutil, subprocess, sys, tempfile, time


def write_metrics(path, lines, spike_step):
    random.seed(1)
    with open(path, "w") as f:
        f.write(json.dumps({"type": "header", "format": "trainscope.train_metrics", "version": 1,
                            "rank": 0, "world_size": 1, "params": 1, "start_unix_us": 0,
                            "config": {}}) + "\n")
        for s in range(1, lines + 1):
            loss = 10 * math.exp(-s / (lines / 5)) + random.random() * 0.1
            if s == spike_step:
                loss += 30
            f.write('{"type":"step","step":%d,"loss":%.6f,"lr":0.0003,"grad_norm":%.5f,'
                    '"tokens":4096,"step_ms":%.3f,"tokens_per_s":40000.0,"phases_ms":'
                    '{"data_wait":0.1,"h2d":0.2,"forward":%.3f,"backward":%.3f,"comm_wait":0.0,'
                    '"optimizer":1.0},"comm_ms":0.0,"host_rss_bytes":%d,'
                    '"device_mem_allocated_bytes":null,"device_mem_peak_bytes":null}\n'
                    % (s, loss, 1 + random.random(), 100 + random.random() * 5,
                       30 + random.random(), 60 + random.random() * 3, 10**9 + s * 100))
            if s == spike_step:
                f.write(json.dumps({"type": "spike", "step": s, "rank": 0, "loss": loss,
                                    "rule": "mad", "threshold": 12.0, "median": 5.0}) + "\n")
        f.write(json.dumps({"type": "end", "reason": "done", "step": lines, "rank": 0}) + "\n")


def timed(argv):
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def browser_times(html, runs=3):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
    out = []
    try:
        for _ in range(runs):
            t0 = time.monotonic()
            d.get("file://" + html)
            while not d.execute_script("return !!window.tsReport"):
                time.sleep(0.02)
            out.append({"wall_s": round(time.monotonic() - t0, 3),
                        "render_ms": round(d.execute_script("return window.tsReport.render_ms"), 1)})
    finally:
        d.quit()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--lines", type=int, default=1000000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_report_bench_")
    try:
        os.makedirs(os.path.join(tmp, "train"))
        metrics = os.path.join(tmp, "train", "metrics.rank0.jsonl")
        write_metrics(metrics, a.lines, a.lines * 2 // 3)
        html = os.path.join(tmp, "report.html")
        wc_s = timed(["wc", "-l", metrics])
        report_s = timed([a.binary, "report", tmp, "-o", html])
        result = {
            "argv": sys.argv,
            "versions": {"chromium": subprocess.run(["/usr/bin/chromium", "--version"],
                                                    capture_output=True, text=True).stdout.strip()},
            "lines": a.lines,
            "metrics_bytes": os.path.getsize(metrics),
            "html_bytes": os.path.getsize(html),
            "report_s": round(report_s, 2),
            "wc_l_s": round(wc_s, 3),
            "report_over_wc_l": round(report_s / wc_s, 1),
            "browser": browser_times(html),
        }
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
