#!/bin/bash
# Trace-analysis benchmark, side by side in one run on the same file:
#   1. trainscope's trace path (streaming read + full analysis + JSON report): trace_bench, and
#      the CLI `trainscope trace analyze --json` when it is built;
#   2. Python's json.load of the same file alone (the venv's Python, $PY), the peer;
#   3. simdjson's raw parse speed of the same file (ondemand, every field visited): the limit.
# Peak RSS of each from /usr/bin/time. Writes JSON (argv, versions, figures) to stdout.
#   bench/trace/run_bench.sh BUILD_DIR [BYTES=1000000000] [TMPDIR=/tmp]
# The generated file is deleted at the end. Python needs ~5x the file size in RAM.
set -euo pipefail
build=${1:?usage: run_bench.sh BUILD_DIR [BYTES] [TMPDIR]}
bytes=${2:-1000000000}
tmp=${3:-/tmp}
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}
file="$tmp/ts_trace_bench_rank0.pt.trace.json"
trap 'rm -f "$file" "$tmp"/ts_trace_bench_*.time "$tmp"/ts_trace_bench_*.out' EXIT
bin="$build/bench"
"$bin/trace_gen" --bytes "$bytes" --out "$file" 2> "$tmp/ts_trace_bench_gen.time"
size=$(stat -c %s "$file")
cat "$file" > /dev/null  # same page-cache state for every reader
t() {  # t NAME CMD...: runs with /usr/bin/time, keeps stdout in $tmp/ts_trace_bench_NAME.out
  local name=$1; shift
  /usr/bin/time -f '{"wall_s": %e, "user_s": %U, "sys_s": %S, "max_rss_kb": %M}' \
    -o "$tmp/ts_trace_bench_$name.time" "$@" > "$tmp/ts_trace_bench_$name.out"
}
t trainscope "$bin/trace_bench" "$file"
if [ -x "$build/bin/trainscope" ]; then
  TRAINSCOPE_NO_PROGRESS=1 t cli "$build/bin/trainscope" trace analyze --json "$file"
fi
t simdjson "$bin/trace_simdjson_raw" "$file"
t python "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d['traceEvents']))" "$file"
"$PY" - "$tmp" "$size" "$build" "$@" <<'PY'
import json, sys, platform, subprocess
tmp, size, build = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    try:
        return json.load(open(f"{tmp}/ts_trace_bench_{name}.time"))
    except FileNotFoundError:
        return None
ts, py, sj, cli = load("trainscope"), load("python"), load("simdjson"), load("cli")
ts_out = json.load(open(f"{tmp}/ts_trace_bench_trainscope.out"))
sj_out = json.load(open(f"{tmp}/ts_trace_bench_simdjson.out"))
cpu = lambda r: r["user_s"] + r["sys_s"]
res = {
  "bench": "trace", "argv": sys.argv, "file_bytes": size,
  "versions": {"python": platform.python_version(), "simdjson_kernel": "see docs/PERFORMANCE.md"},
  "trainscope": {**ts, **ts_out}, "python_json_load": py, "simdjson_raw": {**sj, **sj_out},
  "figures": {
    "speedup_vs_python_wall": round(py["wall_s"] / ts["wall_s"], 2),
    "speedup_vs_python_cpu": round(cpu(py) / cpu(ts), 2),
    "trainscope_peak_rss_over_file": round(ts["max_rss_kb"] * 1024 / size, 3),
    "python_peak_rss_over_file": round(py["max_rss_kb"] * 1024 / size, 3),
    "trainscope_gb_per_s_wall": round(size / ts["wall_s"] / 1e9, 3),
    "simdjson_raw_gb_per_s_wall": round(size / sj["wall_s"] / 1e9, 3),
    "trainscope_over_simdjson_raw_time_wall": round(ts["wall_s"] / sj["wall_s"], 2),
    "trainscope_over_simdjson_raw_time_cpu": round(cpu(ts) / cpu(sj), 2),
  },
}
if cli:
  res["cli"] = cli
  res["figures"]["cli_speedup_vs_python_wall"] = round(py["wall_s"] / cli["wall_s"], 2)
  res["figures"]["cli_peak_rss_over_file"] = round(cli["max_rss_kb"] * 1024 / size, 3)
print(json.dumps(res, indent=2))
PY
