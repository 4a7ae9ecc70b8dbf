#!/usr/bin/python3
"""`trainscope train --probe-batch` end to end (issue 19): on a tiny config, each candidate is a
real child trainer run. Checks the --json report's structure, that the figures are plausible
(memory grows with the micro-batch, tokens/s positive, the recommendation multiplies out to the
global batch), that a limit the smallest candidate cannot meet exits 1 with that row, and that a
global batch the ranks do not divide exits 2 before any child runs. Exits non-zero with the
reason."""
import argparse, json, os, subprocess, sys, tempfile


def run(a, run_dir, *extra):
    argv = [a.binary, "train", "--config", a.config, "--run-dir", run_dir, "--probe-batch",
            "--probe-steps", "3", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=100)


def fail(msg, p=None):
    print("FAIL:", msg)
    if p is not None:
        print("exit", p.returncode, "\nstdout:", p.stdout[-3000:], "\nstderr:", p.stderr[-3000:])
    return 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_probe_")

    # 1. A recommendation (exit 0) with the documented keys.
    p = run(a, os.path.join(tmp, "ok"), "--json")
    if p.returncode != 0:
        return fail("probe did not exit 0", p)
    j = json.loads(p.stdout)
    for k in ("format", "version", "global_batch", "ranks", "per_rank_batch", "seq_len", "steps",
              "warmup_steps", "memory_limit_bytes", "memory_limit_source", "safe_fraction",
              "candidates", "stop_reason", "recommended", "verdict"):
        if k not in j:
            return fail(f"key {k} missing", p)
    assert j["format"] == "trainscope.train_probe" and j["version"] == 1, j
    assert j["global_batch"] == 8 and j["per_rank_batch"] == 8 and j["steps"] == 3, j
    ran = [c for c in j["candidates"] if c["ran"]]
    if len(ran) < 2 or not all(c["ok"] for c in ran):
        return fail("expected at least two successful candidates", p)
    for c in ran:
        assert c["steps"] == 3, c
        assert c["memory_source"] == "host_rss", c
        assert 50e6 < c["peak_memory_bytes"] < 4e9, c  # libtorch alone is ~100 MB
        assert 0 < c["memory_share"] < j["safe_fraction"], c
        assert c["tokens_per_s"] > 0 and c["projected_tokens_per_s"] > 0, c
        assert 0 < c["relative"] <= 1, c
        assert c["accum"] * c["micro_batch"] == 8, c
        metrics = os.path.join(tmp, "ok", "train", "probe", f"mb{c['micro_batch']}", "train",
                               "metrics.rank0.jsonl")
        if not os.path.exists(metrics):
            return fail(f"no child metrics at {metrics}", p)
    mbs = [c["micro_batch"] for c in ran]
    assert mbs == sorted(mbs) and mbs[0] == 1, mbs
    # Memory grows with the micro-batch: the largest run used more than the smallest (a few MB
    # per sequence here; RSS noise is well under that).
    if not ran[-1]["peak_memory_bytes"] > ran[0]["peak_memory_bytes"]:
        return fail("peak memory did not grow with the micro-batch: " +
                    str([(c["micro_batch"], c["peak_memory_bytes"]) for c in ran]), p)
    rec = j["recommended"]
    assert rec is not None and rec["micro_batch"] * rec["accum"] * j["ranks"] == 8, rec
    assert rec["accum"] <= 16 and not rec["accum_over_cap"], rec
    assert [c["verdict"] for c in j["candidates"]].count("recommended") == 1, j["candidates"]
    if "probe: micro-batch 1" not in p.stderr:
        return fail("no progress lines on stderr", p)

    # 2. A limit under the smallest candidate's peak, in the table form: one child, its row,
    # exit 1; every line fits 120 columns.
    p = run(a, os.path.join(tmp, "tight"), "--probe-memory-limit", "0.01")
    if p.returncode != 1:
        return fail("a limit nothing fits under must exit 1", p)
    rows = [l for l in p.stdout.splitlines() if l.strip() and l.strip()[0].isdigit()]
    if len(rows) != 1 or "over the safe limit" not in rows[0]:
        return fail("expected one row, over the safe limit", p)
    if "verdict: even micro-batch 1 does not fit" not in p.stdout:
        return fail("the table lacks the verdict", p)
    wide = [l for l in p.stdout.splitlines() if len(l) > 120]
    if wide:
        return fail(f"lines over 120 columns: {wide}", p)

    # 3. Bad usage: exit 2, nothing run.
    p = run(a, os.path.join(tmp, "bad"), "--probe-ranks", "3", "--probe-global-batch", "8")
    if p.returncode != 2 or "not a multiple of the 3 ranks" not in p.stderr:
        return fail("a global batch the ranks do not divide must exit 2", p)
    if os.path.exists(os.path.join(tmp, "bad", "train", "probe", "mb1")):
        return fail("a child ran despite the bad usage")
    print(f"ok: candidates {mbs}, recommended micro-batch {rec['micro_batch']} x accumulation "
          f"{rec['accum']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
