#!/usr/bin/python3
"""Prints the figures of one device-check report (bench/device/run.sh) and a one-line summary:
summarize.py NAME REPORT.json EXIT_CODE. Exits 1 when the report is missing or not JSON."""
import json, sys


def gb(x):
    return f"{x / 1e9:.1f} GB" if isinstance(x, (int, float)) and x >= 0 else "?"


def device(d):
    for dev in d.get("devices", []):
        print(f"  device {dev.get('index')}: {dev.get('kind')} {dev.get('name')}, "
              f"memory {gb(dev.get('memory_total_bytes', -1))}, health {dev.get('health')}")
    for b in d.get("benchmarks", []):
        frac = b.get("fraction")
        print(f"  {b.get('device')} {b.get('name')}: {b.get('value', 0):.1f} {b.get('unit')}"
              + (f" = {100 * frac:.0f}% of {b.get('peak'):.1f} ({b.get('peak_formula', '')})"
                 if isinstance(frac, (int, float)) and b.get("peak") else ""))
    bad = [c for c in d.get("checks", []) if c.get("verdict") not in ("pass", "skip")]
    for c in bad:
        print(f"  {c.get('verdict')}: {c.get('name')}: {c.get('value')} ({c.get('advice', '')})")
    n = {v: sum(1 for c in d.get("checks", []) if c.get("verdict") == v) for v in ("pass", "skip")}
    return (f"{'PASS' if d.get('passed') else 'FAIL'}: {n['pass']} checks pass, {n['skip']} skip, "
            f"{len(bad)} warn or fail, {len(d.get('benchmarks', []))} benchmarks"
            + (f"; {d['reason']}" if d.get("reason") else ""))


def comm(d):
    largest = {}
    for r in d.get("results", []):
        if r.get("op") not in largest or r["bytes"] > largest[r["op"]]["bytes"]:
            largest[r["op"]] = r
    for op, r in largest.items():
        print(f"  {op} {r['bytes'] / 2**20:.0f} MiB: busbw {r['busbw_gbps']:.1f} GB/s, algbw "
              f"{r['algbw_gbps']:.1f} GB/s, {r['time_us']:.0f} us, correct {r['correct']}")
    best = max((r["busbw_gbps"] for r in largest.values()), default=0)
    return (f"{'PASS' if d.get('passed') else 'FAIL'}: {d.get('backend')} x {d.get('world_size')} "
            f"ranks, {len(d.get('results', []))} sizes checked, {d.get('wrong_total')} wrong, "
            f"best busbw {best:.1f} GB/s" + (f"; {d['reason']}" if d.get("reason") else ""))


def train(d):
    print(f"  {d.get('device')} ({d.get('device_name')}), {d.get('precision')}, "
          f"{d.get('params'):,} params, {d.get('steps')} steps in {d.get('seconds', 0):.1f} s")
    print(f"  loss {d.get('loss_start', 0):.3f} -> {d.get('loss_end', 0):.3f} "
          f"(target < {d.get('target_loss')})")
    print(f"  tokens/s {d.get('tokens_per_s', 0):,.0f}; model {d.get('model_flops_per_s', 0) / 1e12:.2f} "
          f"TFLOP/s of a {d.get('peak_flops', 0) / 1e12:.1f} TFLOP/s peak ({d.get('peak_source')}): "
          f"MFU {100 * d.get('mfu', 0):.2f}%")
    print(f"  memory peak {gb(d.get('memory_peak_bytes', -1))} ({d.get('memory_source')})")
    return (f"{'PASS' if d.get('passed') else 'FAIL'}: loss {d.get('loss_start', 0):.3f} -> "
            f"{d.get('loss_end', 0):.3f}, {d.get('tokens_per_s', 0):,.0f} tokens/s, MFU "
            f"{100 * d.get('mfu', 0):.2f}%" + (f"; {d['reason']}" if d.get("reason") else ""))


def main():
    name, path, rc = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"device-check: {name}: no report (exit {rc}): {e}")
        return 1
    kind = d.get("format", "")
    f = device if kind.endswith(".device") else comm if kind.endswith(".comm") else train
    print(f"device-check: {name}: {f(d)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
