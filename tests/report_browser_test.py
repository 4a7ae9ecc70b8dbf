#!/usr/bin/python3
"""`trainscope report` in headless Chromium (issue 17): a real 2-rank run with an injected loss
spike, plus the evidence other verbs leave in a run directory (a data scan, a trace analysis of
the run's own metrics, flight recorder dumps from tests/data/hang/run_dir, an environment
fingerprint), rendered to one HTML file and loaded from file://. Checks: no console error, no
request to anything but file: or data: URLs, every chart canvas drawn (coloured pixels, not only
axes), the spike marked at its step on the loss chart, every section with evidence present, and a
non-trivial screenshot saved to --artifacts (report.png).

Skips (exit 77) only when chromium or chromedriver is not installed.
"""
import argparse, json, os, shutil, struct, subprocess, sys, tempfile, time, zlib

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SKIP = 77


def run(argv, timeout_s=120, stdout=None):
    p = subprocess.run(argv, capture_output=stdout is None, stdout=stdout, text=True,
                       timeout=timeout_s)
    return p


def png_stats(path):
    """(width, height, distinct colours) of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"PNG depth {depth} colour type {ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    colours = set()
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every 4th row is plenty for counting colours
            for x in range(0, stride, bpp * 2):
                colours.add(bytes(line[x:x + 3]))
        prev = line
    return w, h, len(colours)


def make_run(a, tmp):
    run_dir = os.path.join(tmp, "spike-run")
    t0 = time.monotonic()
    p = run([a.binary, "launch", "-n", "2", "--no-bind-cpus", "--stop-grace-s", "2", "--run-dir",
             run_dir, "--", a.binary, "train", "--config", a.config, "--inject",
             "lr_spike:factor=300,step=7"], a.timeout)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: the 2-rank run exited {p.returncode}: {p.stderr[-1500:]}")
    # What other verbs leave in a run directory.
    os.makedirs(os.path.join(run_dir, "data"))
    with open(os.path.join(run_dir, "data", "scan.json"), "w") as f:
        run([a.binary, "data", "scan", a.corpus, "--json"], a.timeout, stdout=f)
    os.makedirs(os.path.join(run_dir, "trace"))
    with open(os.path.join(run_dir, "trace", "analysis.json"), "w") as f:
        run([a.binary, "trace", "analyze", os.path.join(run_dir, "train"), "--json"], a.timeout,
            stdout=f)
    shutil.copytree(os.path.join(a.hang_fixture, "hang"), os.path.join(run_dir, "hang"))
    with open(os.path.join(run_dir, "fingerprint.json"), "w") as f:
        run([a.binary, "env", "fingerprint", "--json"], a.timeout, stdout=f)
    print(f"run directory made in {time.monotonic() - t0:.1f} s", flush=True)
    return run_dir


def browser_skip_reason():
    """Why the browser tests cannot run here (Chromium, its driver or selenium missing), or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return f"{path} is not installed (Debian chromium, chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "python3-selenium is not installed"
    return None


def headless_chrome(performance_log=False):
    """Debian's Chromium, headless at 1280x1000, keeping the console log (and the network log)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(arg)
    logs = {"browser": "ALL", "performance": "ALL"} if performance_log else {"browser": "ALL"}
    opts.set_capability("goog:loggingPrefs", logs)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def check_page(a, html, problems):
    driver = headless_chrome(performance_log=True)
    try:
        driver.set_page_load_timeout(30)
        driver.get("file://" + os.path.abspath(html))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not driver.execute_script("return !!window.tsReport"):
            time.sleep(0.1)
        info = driver.execute_script(
            "return window.tsReport ? {ms: window.tsReport.render_ms, "
            "sections: window.tsReport.data.sections} : null")
        if not info:
            problems.append("the page never rendered (window.tsReport not set)")
            return
        print(f"rendered in {info['ms']:.0f} ms; sections {info['sections']}", flush=True)
        # Every section with evidence is on the page.
        for s in info["sections"]:
            sec_id = {"loss": "curves", "val_loss": "curves", "lr": "curves",
                      "grad_norm": "curves"}.get(s, s)
            if not driver.execute_script(f"return !!document.getElementById('sec-{sec_id}')"):
                problems.append(f"section {s} has evidence but is not on the page")
        for want in ("loss", "lr", "grad_norm", "phases", "ranks", "memory", "flight_recorder",
                     "data_scan", "trace", "fingerprint", "findings"):
            if want not in info["sections"]:
                problems.append(f"section {want} not drawn (its evidence is in the run directory)")
        # Every canvas drawn: coloured pixels (series, bars, boxes), not only grey axes. A
        # dygraphs chart has two canvases in its graphDiv (dygraph.js createInterface_): hidden_,
        # first, the chart drawn, and canvas_ after it, the interaction overlay (hover dots, zoom
        # rectangle), blank until the pointer is over it. The overlays are left out, identified
        # by the chart objects themselves; every other canvas must be drawn.
        canvases = driver.execute_script("""
            var charts = window.tsReport.charts || [], overlays = [], bad = [];
            charts.forEach(function (g, i) {
              var own = g.graphDiv ? Array.from(g.graphDiv.querySelectorAll('canvas')) : [];
              if (own.length !== 2 || own[0] !== g.hidden_ || own[1] !== g.canvas_)
                bad.push('chart ' + i + ': its graphDiv does not hold [hidden_, canvas_]');
              overlays.push(g.canvas_);
            });
            var out = Array.from(document.querySelectorAll('canvas')).filter(function (c) {
              return overlays.indexOf(c) < 0;
            }).map(function (c) {
              var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = 0;
              for (var i = 0; i < d.length; i += 4) {
                var mx = Math.max(d[i], d[i+1], d[i+2]), mn = Math.min(d[i], d[i+1], d[i+2]);
                if (d[i+3] > 0 && mx - mn > 50) n++;
              }
              var box = c.closest('[data-chart]');
              return {chart: box ? box.getAttribute('data-chart') : '?', w: c.width, h: c.height,
                      coloured: n};
            });
            return {canvases: out, charts: charts.length, overlays: overlays.length, bad: bad};""")
        problems.extend(canvases["bad"])
        if canvases["overlays"] != canvases["charts"] or canvases["charts"] < 6:
            problems.append(f"{canvases['charts']} dygraphs charts, {canvases['overlays']} overlays")
        canvases = canvases["canvases"]
        if len(canvases) < 8:
            problems.append(f"only {len(canvases)} drawn canvases on the page")
        for c in canvases:
            if c["w"] == 0 or c["h"] == 0 or c["coloured"] < 30:
                problems.append(f"canvas of chart {c['chart']!r} is blank ({c})")
        print(f"{len(canvases)} canvases, fewest coloured pixels "
              f"{min(c['coloured'] for c in canvases) if canvases else 0}", flush=True)
        # The spike: rank 0 logs it at step 8 (lr x300 at step 7).
        marks = driver.execute_script(
            "return Array.from(document.querySelectorAll('[data-chart=loss] .ts-marker'))"
            ".map(function (m) { return [m.dataset.kind, m.dataset.step]; })")
        if ["spike", "8"] not in marks:
            problems.append(f"no spike marker at step 8 on the loss chart (markers {marks})")
        # The stuck collective of the hang fixture is named.
        if not driver.execute_script("return document.querySelectorAll('.stuck').length"):
            problems.append("the flight recorder section names no stuck collective")
        # Screenshot of the whole page.
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(height, 1000), 12000))
        time.sleep(0.5)
        os.makedirs(a.artifacts, exist_ok=True)
        png = os.path.join(a.artifacts, "report.png")
        driver.save_screenshot(png)
        w, h, colours = png_stats(png)
        size = os.path.getsize(png)
        print(f"screenshot {png}: {w}x{h}, {size} bytes, {colours} colours", flush=True)
        if size < 50000 or colours < 64 or h < 2000:
            problems.append(f"screenshot looks trivial: {w}x{h}, {size} bytes, {colours} colours")
        # Console and network, after everything ran.
        for e in driver.get_log("browser"):
            if e.get("level") in ("SEVERE", "WARNING"):
                problems.append(f"console: {e.get('level')} {e.get('message')}")
        urls = []
        for e in driver.get_log("performance"):
            m = json.loads(e["message"])["message"]
            if m.get("method") == "Network.requestWillBeSent":
                urls.append(m["params"]["request"]["url"])
        outside = [u for u in urls if not (u.startswith("file://") or u.startswith("data:"))]
        if outside:
            problems.append(f"requests left the page: {outside[:5]}")
        print(f"{len(urls)} requests, all file:/data:" if not outside else "", flush=True)
    finally:
        driver.quit()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True, help="tests/data/train/spike_tiny.json")
    ap.add_argument("--corpus", required=True, help="tests/data/train/tiny.txt")
    ap.add_argument("--hang-fixture", required=True, help="tests/data/hang/run_dir")
    ap.add_argument("--artifacts", required=True, help="folder for report.png and report.html")
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()
    if (why := browser_skip_reason()) is not None:
        print(f"SKIP: {why}")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="ts_report_browser_")
    problems = []
    try:
        run_dir = make_run(a, tmp)
        html = os.path.join(run_dir, "report.html")
        p = run([a.binary, "report", run_dir, "-o", html, "--json"], a.timeout)
        if p.returncode != 0:
            problems.append(f"report exited {p.returncode}: {p.stderr[-800:]}")
        else:
            summary = json.loads(p.stdout)
            print(f"report: {summary['html_bytes']} bytes, sections {summary['sections']}",
                  flush=True)
            os.makedirs(a.artifacts, exist_ok=True)
            shutil.copy(html, os.path.join(a.artifacts, "report.html"))
            check_page(a, html, problems)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("  " + p, flush=True)
    print("PASSED" if not problems else "FAILED", flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
