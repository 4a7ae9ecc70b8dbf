#!/usr/bin/python3
"""Checkpoint and resume checks of `trainscope train` (issue 14). Exits non-zero with the reason.

--mode exact --ranks N: a run of CONFIG (checkpoints every 3 steps) is the reference; a second
  run resumed from its step-6 checkpoint, in a fresh run directory and then appending to the
  reference's own run directory, must give bit-identical losses for every later step and the
  same final weights (xxh3_64), on every rank. Also: --resume latest with no checkpoint starts
  fresh saying so in one line, and a damaged checkpoint given as PATH is refused (exit 2) with
  the reason and the newest good checkpoint named.
--mode kill: one run (a save after every step) is SIGKILLed at --kills random moments during
  saves and restarted each time with --resume latest; after every kill `trainscope ckpt verify`
  must pass on what is left (an interrupted save is incomplete, not corrupt), and the restarted
  run must continue from the newest complete checkpoint.
  Also in --mode exact: a run stopped by an injected NaN leaves checkpoints/anomaly-step-<N>,
  which `ckpt verify` checks and `--resume latest` passes over for the newest periodic one.
--mode compression --compression powersgd|topk --ranks 2: the same with gradient compression:
  the step-6 checkpoint holds every rank's compressor state (meta.json extra.compression,
  compression.rank<R>.safetensors, `ckpt verify` passes, `ckpt inspect` lists the tensors); the
  run resumed from it is bit-identical to the uninterrupted one. The same checkpoint with the
  compressor state dropped must resume with one warning line and end with OTHER weights (so
  the restore is what makes the first check pass), and resuming with another
  comm.compression warns in one line and runs."""
import argparse, glob, json, os, random, re, shutil, signal, subprocess, sys, tempfile, time


def metrics(run_dir, rank):
    return [json.loads(l) for l in open(os.path.join(run_dir, "train", f"metrics.rank{rank}.jsonl"))
            if l.endswith("\n")]


def last_losses(run_dir, rank):
    """step -> loss, the last record of each step (what readers of an appended file take)."""
    out = {}
    for l in metrics(run_dir, rank):
        if l["type"] == "step":
            out[l["step"]] = l["loss"]
    return out


def weights(run_dir, rank):
    return json.load(open(os.path.join(run_dir, "train", f"weights.rank{rank}.json")))["xxh3_64"]


def train(a, run_dir, extra, check=True):
    argv = [a.binary, "train", "--config", a.config, "--run-dir", run_dir] + extra
    if a.ranks > 1:
        argv = [a.binary, "launch", "-n", str(a.ranks), "--run-dir", run_dir, "--"] + argv
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def exact(a):
    tmp = tempfile.mkdtemp(prefix="ts_resume_")
    ref = os.path.join(tmp, "ref")
    train(a, ref, [])
    steps = json.load(open(a.config))["train"]["steps"]
    ckpt6 = os.path.join(ref, "checkpoints", "step-6")
    assert os.path.isdir(ckpt6), os.listdir(os.path.join(ref, "checkpoints"))
    ref_losses = [last_losses(ref, r) for r in range(a.ranks)]
    ref_weights = [weights(ref, r) for r in range(a.ranks)]
    assert sorted(ref_losses[0]) == list(range(1, steps + 1)), sorted(ref_losses[0])

    def same_as_ref(run_dir, what):
        for r in range(a.ranks):
            got = last_losses(run_dir, r)
            for s in range(7, steps + 1):
                # JSON numbers are written round-trip exact: equal text = equal bits.
                if repr(got.get(s)) != repr(ref_losses[r][s]):
                    raise AssertionError(f"{what}: rank {r} step {s} loss {got.get(s)!r}, "
                                         f"uninterrupted run {ref_losses[r][s]!r}")
            if weights(run_dir, r) != ref_weights[r]:
                raise AssertionError(f"{what}: rank {r} weights {weights(run_dir, r)} != {ref_weights[r]}")

    # 1. Resumed into a fresh run directory from PATH.
    other = os.path.join(tmp, "other")
    train(a, other, ["--resume", ckpt6])
    same_as_ref(other, "resume into a new run dir")
    head = [l for l in metrics(other, 0) if l["type"] == "header"]
    assert head[-1]["resumed_from_step"] == 6, head[-1]
    # 2. Resumed into the reference's own run directory: the metrics are appended and the
    # steps 7.. repeated; the last record of each step must still be bit-identical.
    before = len(metrics(ref, 0))
    train(a, ref, ["--resume", ckpt6])
    lines = metrics(ref, 0)
    assert len(lines) > before and sum(l["type"] == "header" for l in lines) == 2, len(lines)
    same_as_ref(ref, "resume appending to the same run dir")
    # 3. `--resume latest` takes the newest complete checkpoint (step-12: nothing left to do).
    p = train(a, ref, ["--resume", "latest"])
    assert re.search(r"resume: from \S+step-12 \(step 12\)", p.stderr), p.stderr[-1000:]
    # 4. No checkpoint: a fresh start, said in one line.
    fresh = os.path.join(tmp, "fresh")
    p = train(a, fresh, ["--resume", "latest"])
    assert "resume: no checkpoint folder" in p.stderr or "starting fresh" in p.stderr, p.stderr[-1000:]
    same_losses = last_losses(fresh, 0)
    assert all(repr(same_losses[s]) == repr(ref_losses[0][s]) for s in ref_losses[0]), "fresh run differs"
    # 5. A damaged checkpoint as PATH: refused, exit 2, the reason and the newest good one.
    bad = os.path.join(ref, "checkpoints", "step-9")
    with open(os.path.join(bad, "optimizer.safetensors"), "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    def refused(p):  # exit 2; under launch, the launcher names the rank's exit code 2
        return p.returncode == 2 or (a.ranks > 1 and "exited with code 2" in p.stderr)
    p = train(a, os.path.join(tmp, "bad"), ["--resume", bad], check=False)
    assert refused(p), (p.returncode, p.stderr[-1000:])
    assert "hash mismatch" in p.stderr and "optimizer.safetensors" in p.stderr, p.stderr[-1000:]
    assert "newest complete one is " + os.path.join(ref, "checkpoints", "step-12") in p.stderr, p.stderr[-1000:]
    os.truncate(os.path.join(bad, "model.safetensors"), 1000)
    p = train(a, os.path.join(tmp, "bad"), ["--resume", bad], check=False)
    assert refused(p) and "truncated" in p.stderr, (p.returncode, p.stderr[-1000:])
    # 6. An anomaly checkpoint (NaN injected in the backward of step 8: the last good state,
    # step 7, is saved as checkpoints/anomaly-step-7) is verified and kept, but `--resume
    # latest` passes over it and takes the newest periodic one, step-6.
    nan = os.path.join(tmp, "nan")
    p = train(a, nan, ["--inject", "nan_backward:layer=0,step=8"], check=False)
    assert p.returncode != 0, p.stderr[-1000:]
    anomaly7 = os.path.join(nan, "checkpoints", "anomaly-step-7")
    assert os.path.isdir(anomaly7), os.listdir(os.path.join(nan, "checkpoints"))
    assert json.load(open(os.path.join(anomaly7, "meta.json")))["anomaly"] is True
    newest_ok, _ = verify(a, os.path.join(nan, "checkpoints"))
    assert newest_ok == 7, newest_ok  # listed and verified like any other
    p = train(a, nan, ["--resume", "latest"])
    assert re.search(r"resume: from \S+/step-6 \(step 6\)", p.stderr), p.stderr[-1000:]
    same_as_ref(nan, "resume latest past an anomaly checkpoint")
    assert os.path.isdir(anomaly7), "the anomaly checkpoint was removed"
    shutil.rmtree(tmp)
    print(f"ok: {a.ranks} rank(s): resumed from step 6, steps 7..{steps} bit-identical "
          f"(new run dir and appended), weights {ref_weights[0]}; damaged checkpoints refused; "
          f"--resume latest passed over anomaly-step-7")
    return 0


def differences(a, run_dir, ref_losses, ref_weights, first, steps):
    """Where run_dir's losses of steps first..steps or final weights differ from the reference."""
    out = []
    for r in range(a.ranks):
        got = last_losses(run_dir, r)
        for s in range(first, steps + 1):
            if repr(got.get(s)) != repr(ref_losses[r][s]):  # equal text = equal bits
                out.append(f"rank {r} step {s} loss {got.get(s)!r} != {ref_losses[r][s]!r}")
        if weights(run_dir, r) != ref_weights[r]:
            out.append(f"rank {r} weights {weights(run_dir, r)} != {ref_weights[r]}")
    return out


def compression(a):
    kind = a.compression
    flag = ["--compression", kind]
    tmp = tempfile.mkdtemp(prefix="ts_resume_comp_")
    ref = os.path.join(tmp, "ref")
    train(a, ref, flag)
    steps = json.load(open(a.config))["train"]["steps"]
    ckpt6 = os.path.join(ref, "checkpoints", "step-6")
    ref_losses = [last_losses(ref, r) for r in range(a.ranks)]
    ref_weights = [weights(ref, r) for r in range(a.ranks)]
    # What the checkpoint holds.
    meta = json.load(open(os.path.join(ckpt6, "meta.json")))["extra"]["compression"]
    assert meta["settings"]["kind"] == kind and meta["settings"]["world_size"] == a.ranks, meta
    per_rank = [f"compression.rank{r}.safetensors" for r in range(a.ranks)]
    assert set(per_rank) <= set(meta["files"]), meta["files"]
    assert ("compression.safetensors" in meta["files"]) == (kind == "powersgd"), meta["files"]
    verify(a, os.path.join(ref, "checkpoints"))
    p = subprocess.run([a.binary, "ckpt", "inspect", ckpt6, "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr[-1000:])
    listed = {(t["file"], t["name"]) for c in json.loads(p.stdout)["checkpoints"] for t in c["tensors"]}
    for r in range(a.ranks):  # tensor <i> of those the compressor is handed (not all: biases)
        assert any(f == per_rank[r] and re.fullmatch(rf"compression\.{kind}\.\d+\.error", n)
                   for f, n in listed), sorted(listed)[:20]
    # 1. Resumed from step 6: bit-identical to the uninterrupted run.
    resumed = os.path.join(tmp, "resumed")
    p = train(a, resumed, flag + ["--resume", ckpt6])
    assert f"resume: restored the {kind} gradient-compression state" in p.stderr, p.stderr[-2000:]
    assert "warning: resume" not in p.stderr, p.stderr[-2000:]
    diff = differences(a, resumed, ref_losses, ref_weights, 7, steps)
    assert not diff, f"{kind}: resumed run differs from the uninterrupted one: {diff[:4]}"
    # 2. The same checkpoint without the compressor state (files and manifest entries
    # removed; `ckpt verify` still passes): a fresh compressor, one warning, other weights.
    dropped = os.path.join(tmp, "dropped", "step-6")
    shutil.copytree(ckpt6, dropped)
    manifest = json.load(open(os.path.join(dropped, "manifest.json")))
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith("compression")]
    json.dump(manifest, open(os.path.join(dropped, "manifest.json"), "w"), indent=2)
    for f in glob.glob(os.path.join(dropped, "compression*.safetensors")):
        os.remove(f)
    verify(a, os.path.dirname(dropped))
    run2 = os.path.join(tmp, "run_dropped")
    p = train(a, run2, flag + ["--resume", dropped])
    assert p.stderr.count("warning: resume:") == 1, p.stderr[-2000:]
    assert f"the {kind} compressor starts fresh" in p.stderr, p.stderr[-2000:]
    diff = differences(a, run2, ref_losses, ref_weights, 7, steps)
    assert any("weights" in d for d in diff), f"{kind}: dropping the state changed nothing: the test cannot fail"
    # 3. Another comm.compression on resume: a warning, not an error.
    other = "topk" if kind == "powersgd" else "powersgd"
    p = train(a, os.path.join(tmp, "other"), ["--compression", other, "--resume", ckpt6])
    assert p.stderr.count("warning: resume:") == 1, p.stderr[-2000:]
    assert f"this run uses {other}" in p.stderr, p.stderr[-2000:]
    shutil.rmtree(tmp)
    print(f"ok: {a.ranks} ranks, {kind}: resumed from step 6, steps 7..{steps} and weights "
          f"bit-identical ({ref_weights[0]}); with the state dropped: {len(diff)} differences "
          f"and one warning; another compression on resume: one warning")
    return 0


def verify(a, folder):
    p = subprocess.run([a.binary, "ckpt", "verify", folder, "--json"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"ckpt verify {folder}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-1000:]}")
    j = json.loads(p.stdout)
    complete = [c["step"] for c in j["checkpoints"] if c["complete"] and c["ok"]]
    incomplete = [c["path"] for c in j["checkpoints"] if not c["complete"]]
    return (max(complete) if complete else None), incomplete


def kill(a):
    rng = random.Random(a.seed)
    run = tempfile.mkdtemp(prefix="ts_ckpt_kill_")
    folder = os.path.join(run, "checkpoints")
    newest = None  # newest complete checkpoint step after the last kill
    in_save = 0
    t0 = time.time()
    for i in range(a.kills):
        argv = [a.binary, "train", "--config", a.config, "--run-dir", run, "--resume", "latest"]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Let it save a random number of times, then kill it during a save: the moment its
        # temporary directory appears, after a random 0-4 ms more.
        skip = rng.randint(0, 3)
        deadline = time.time() + 30
        seen = set()
        hit = False
        while time.time() < deadline and p.poll() is None:
            tmps = glob.glob(os.path.join(folder, f"step-*.tmp-{p.pid}"))
            fresh = [t for t in tmps if t not in seen]
            if fresh:
                seen.update(fresh)
                if len(seen) > skip:
                    time.sleep(rng.uniform(0, 0.004))
                    hit = True
                    break
            time.sleep(0.0005)
        if p.poll() is not None:
            raise AssertionError(f"kill {i}: the trainer ended by itself: exit {p.returncode}\n{p.stderr.read()[-2000:]}")
        if not hit:
            p.kill()
            raise AssertionError(f"kill {i}: no save seen in 30 s")
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        err = p.stderr.read()
        # It continued from the newest complete checkpoint the previous kill left.
        want = (rf"resume: from \S+/step-{newest} \(step {newest}\)" if newest is not None
                else r"starting fresh")
        if not re.search(want, err):
            raise AssertionError(f"kill {i}: expected /{want}/ on stderr, got:\n{err[-2000:]}")
        heads = [l for l in metrics(run, 0) if l["type"] == "header"]
        assert heads[-1]["resumed_from_step"] == (newest or 0), (i, heads[-1]["resumed_from_step"], newest)
        newest, incomplete = verify(a, folder)
        # A kill that landed mid-save left this process's temporary directory, which verify
        # must list as an incomplete checkpoint (not a corrupt one, not a complete one).
        left = glob.glob(os.path.join(folder, f"step-*.tmp-{p.pid}"))
        listed = {os.path.basename(x.rstrip("/")) for x in incomplete}
        unlisted = [t for t in left if os.path.basename(t) not in listed]
        if unlisted:
            raise AssertionError(f"kill {i}: {unlisted} left by the kill, verify did not call it incomplete: {incomplete}")
        in_save += bool(left)
        # newest None: the kill hit the first save of a fresh start; the next start is fresh.
    # The test is about interrupted saves: some kills must have landed in one. (With a save
    # after every step and the kill 0-4 ms after a save's directory appears, most do.)
    if in_save == 0:
        raise AssertionError(f"none of the {a.kills} SIGKILLs landed mid-save (no step-*.tmp-<pid> "
                             "was left): the kills did not test interrupted saves")
    # The last restart finishes normally from the newest complete checkpoint.
    last = (newest or 0) + 2
    p = subprocess.run([a.binary, "train", "--config", a.config, "--run-dir", run, "--resume",
                        "latest", "--steps", str(last)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert (f"step-{newest} (step {newest})" if newest else "starting fresh") in p.stderr, p.stderr[-1000:]
    lines = metrics(run, 0)
    assert lines[-1]["type"] == "end" and lines[-1]["reason"] == "done" and lines[-1]["step"] == last, lines[-1]
    verify(a, folder)
    shutil.rmtree(run)
    print(f"ok: {a.kills} SIGKILLs ({in_save} left a save unfinished), verify passed after each, "
          f"every restart resumed from the newest complete checkpoint; {time.time() - t0:.1f} s")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--mode", choices=["exact", "kill", "compression"], default="exact")
    ap.add_argument("--compression", choices=["powersgd", "topk"], default="powersgd")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    print("seed", a.seed)
    try:
        return {"exact": exact, "kill": kill, "compression": compression}[a.mode](a)
    except AssertionError as e:
        print("FAIL:", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
