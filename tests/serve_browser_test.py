#!/usr/bin/env python3
"""`trainscope serve` in headless Chromium (issue 17): the live page follows a run directory
while a job writes into it.

1. A run directory with a metrics file of 20 steps (the documented format, as a user job
   writing it would); `trainscope serve RUN --port 0` prints its URL; the page opens and
   shows steps 1-20.
2. A step 21 line is appended: the page shows it within 5 s (its summary line "steps 1-21";
   the page polls data.json every 2 s).
3. With --train: a real `trainscope train` writes into a second served run directory; the
   page shows its last step within 5 s of the end record.
Throughout: no console errors, every request the page made went to the server (none leaves
the machine), and a screenshot is saved (build/test-artifacts/) and checked to be non-trivial.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

STEP_RE = re.compile(r"steps (\d+)-(\d+)")


def step_line(step):
    return json.dumps({
        "type": "step", "step": step, "loss": 4.0 - 0.01 * step, "lr": 1e-3, "grad_norm": 1.5,
        "tokens": 512, "step_ms": 20.0, "tokens_per_s": 25600.0,
        "phases_ms": {"data_wait": 1.0, "h2d": 0.5, "forward": 6.0, "backward": 10.0,
                      "comm_wait": 0.0, "optimizer": 2.5},
        "comm_ms": 0.0, "host_rss_bytes": 100000000, "device_mem_allocated_bytes": None,
        "device_mem_peak_bytes": None}) + "\n"


def write_run(run, steps):
    os.makedirs(os.path.join(run, "train"), exist_ok=True)
    header = {"type": "header", "format": "trainscope.train_metrics", "version": 1, "rank": 0,
              "world_size": 1, "params": 1000, "start_unix_us": 1750000000000000, "config": {}}
    with open(os.path.join(run, "train", "metrics.rank0.jsonl"), "w") as fh:
        fh.write(json.dumps(header) + "\n")
        for s in range(1, steps + 1):
            fh.write(step_line(s))


def start_serve(binary, run):
    p = subprocess.Popen([binary, "serve", run, "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.match(r"serve: (http://127\.0\.0\.1:\d+/)$", line.strip())
    assert m, f"first line {line!r}; stderr {p.stderr.read() if p.poll() is not None else ''}"
    return p, m.group(1)


def stop_serve(p):
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=10)
    assert rc == 0, f"serve exited {rc} after SIGINT: {p.stderr.read()}"


def shown_last_step(driver):
    # Read in one script: the live page replaces its elements on every redraw, so an element
    # found in one call can be gone (stale) by the next.
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll('.summary-line'))"
        ".map(function (e) { return e.innerText; });")
    for text in texts or []:
        m = STEP_RE.search(text)
        if m:
            return int(m.group(2))
    return None


def wait_for_step(driver, step, limit_s):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        shown = shown_last_step(driver)
        if shown is not None and shown >= step:
            return time.monotonic() - t0, shown
        time.sleep(0.1)
    return None, shown_last_step(driver)


def check_page(driver, url, artifacts, name):
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, f"console errors: {errors}"
    resources = driver.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; });")
    outside = [r for r in resources if not r.startswith(url)]
    assert not outside, f"requests that left the server: {outside}"
    assert any(r.startswith(url + "data.json") for r in resources), \
        f"the live page never fetched data.json: {resources}"
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, name)
    assert driver.save_screenshot(shot), shot
    with open(shot, "rb") as fh:
        png = fh.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, (shot, len(png))
    print(f"screenshot {shot}: {len(png)} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--train-config", help="also follow a real `trainscope train` run")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = ap.parse_args()

    opts = webdriver.ChromeOptions()
    opts.binary_location = args.chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,2000", "--no-first-run", "--disable-extensions",
              "--disable-background-networking", "--disable-component-update"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(args.chromedriver), options=opts)
    driver.set_page_load_timeout(30)
    serves = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "run")
            write_run(run, 20)
            p, url = start_serve(args.binary, run)
            serves.append(p)
            driver.get(url)
            took, shown = wait_for_step(driver, 20, 10)
            assert took is not None, f"the page shows step {shown}, not 20"
            with open(os.path.join(run, "train", "metrics.rank0.jsonl"), "a") as fh:
                fh.write(step_line(21))
            took, shown = wait_for_step(driver, 21, 5)
            assert took is not None, f"step 21 not shown within 5 s (page: {shown})"
            print(f"appended step 21 shown after {took:.2f} s")
            time.sleep(2.5)  # one more poll: it must not have raised an error either
            check_page(driver, url, args.artifacts, "serve_live.png")
            # Leave the page before its server stops: a poll at the stopped server would be a
            # console error (ERR_CONNECTION_REFUSED) found by the next page's check.
            driver.get("about:blank")
            stop_serve(p)
            serves.remove(p)

            if args.train_config:
                run2 = os.path.join(tmp, "train_run")
                os.makedirs(run2)
                p, url = start_serve(args.binary, run2)
                serves.append(p)
                driver.get(url)
                train = subprocess.run(
                    [args.binary, "train", "--config", args.train_config, "--run-dir", run2,
                     "--json"], capture_output=True, text=True, timeout=300,
                    env=dict(os.environ, TRAINSCOPE_NO_PROGRESS="1"))
                assert train.returncode == 0, train.stderr
                last = json.loads(train.stdout)["steps"]
                took, shown = wait_for_step(driver, last, 5)
                assert took is not None, f"trained step {last} not shown within 5 s ({shown})"
                print(f"trainscope train's last step {last} shown {took:.2f} s after it ended")
                check_page(driver, url, args.artifacts, "serve_live_train.png")
                stop_serve(p)
                serves.remove(p)
    finally:
        driver.quit()
        for p in serves:
            p.kill()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
