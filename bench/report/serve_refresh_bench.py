#!/usr/bin/python3
"""`trainscope serve` refresh cost on a long run (issue: serve must refresh incrementally).
Writes a synthetic metrics file of --lines step records (report_bench.py's generator), starts
`trainscope serve --port 0` on it, and times GET /data.json side by side in one run:
  full     the first request: the whole run collected (metrics parse, diagnose, the rest);
  refresh  after appending --append step lines: only the appended lines are parsed (diagnose
           waits for its backoff, serve.h / report.h CollectorOptions);
  refresh_with_diagnose  after a non-metrics file of the run changed (a doctor report.json
           written): diagnose runs again over the whole run, the metrics are still incremental.
Every answer is checked: its last loss step must be the last step written (exit 1 otherwise).
Prints one JSON object: argv, figures (medians of --repeat), ratios.

  bench/report/serve_refresh_bench.py --binary build/bin/trainscope [--lines 1000000]
"""
import argparse, importlib.util, json, os, shutil, statistics, subprocess, sys, tempfile, time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def load_generator():
    spec = importlib.util.spec_from_file_location("report_bench",
                                                  os.path.join(HERE, "report_bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def get(url):
    t0 = time.monotonic()
    with urllib.request.urlopen(url + "data.json", timeout=600) as r:
        body = r.read()
    return time.monotonic() - t0, json.loads(body)


def last_loss_step(data):
    return data["runs"][0]["ranks"][0]["series"]["loss"]["x"][-1]


def step_line(s):
    return ('{"type":"step","step":%d,"loss":1.5,"lr":0.0003,"grad_norm":1.2,"tokens":4096,'
            '"step_ms":100.0,"tokens_per_s":40000.0,"phases_ms":{"data_wait":0.1,"h2d":0.2,'
            '"forward":30.0,"backward":60.0,"comm_wait":0.0,"optimizer":1.0},"comm_ms":0.0,'
            '"host_rss_bytes":1000000000,"device_mem_allocated_bytes":null,'
            '"device_mem_peak_bytes":null}\n' % s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--lines", type=int, default=1000000)
    ap.add_argument("--append", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_serve_bench_")
    server = None
    try:
        os.makedirs(os.path.join(tmp, "train"))
        metrics = os.path.join(tmp, "train", "metrics.rank0.jsonl")
        gen = load_generator()
        gen.write_metrics(metrics, a.lines, a.lines * 2 // 3)
        # The generator closes the run with an "end" record; a live run has none.
        with open(metrics, "rb+") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read()
            f.truncate(size - len(tail) + tail.rstrip(b"\n").rfind(b"\n") + 1)
        server = subprocess.Popen([a.binary, "serve", tmp, "--port", "0"],
                                  stdout=subprocess.PIPE, text=True)
        url = server.stdout.readline().split()[-1]
        ok = True
        full_s, data = get(url)
        ok &= last_loss_step(data) == a.lines
        step = a.lines
        refresh, with_diagnose = [], []
        for i in range(a.repeat):
            with open(metrics, "a") as f:
                for _ in range(a.append):
                    step += 1
                    f.write(step_line(step))
            t, data = get(url)
            refresh.append(t)
            ok &= last_loss_step(data) == step
            with open(metrics, "a") as f:
                for _ in range(a.append):
                    step += 1
                    f.write(step_line(step))
            with open(os.path.join(tmp, "report.json"), "w") as f:
                json.dump({"format": "trainscope.doctor", "version": 1, "passed": True,
                           "run": i}, f)
            t, data = get(url)
            with_diagnose.append(t)
            ok &= last_loss_step(data) == step
        r = statistics.median(refresh)
        d = statistics.median(with_diagnose)
        print(json.dumps({
            "argv": sys.argv,
            "lines": a.lines, "append": a.append, "repeat": a.repeat,
            "metrics_bytes": os.path.getsize(metrics),
            "full_s": round(full_s, 3),
            "refresh_s": [round(t, 4) for t in refresh],
            "refresh_with_diagnose_s": [round(t, 3) for t in with_diagnose],
            "refresh_over_full": round(r / full_s, 4),
            "refresh_with_diagnose_over_full": round(d / full_s, 3),
            "checked": ok,
        }, indent=1))
        return 0 if ok else 1
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
