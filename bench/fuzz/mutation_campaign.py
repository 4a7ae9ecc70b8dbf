#!/usr/bin/python3
"""Mutation campaign: thousands of damaged inputs through the real CLI, as a hostile user would.

For each parser the CLI exposes (Chrome traces, phase logs, JSONL/text corpora, Megatron
.idx/.bin, .npy, safetensors, CSV, environment fingerprints, trainer configs) it takes the
test fixtures, applies seeded mutations (bit flips, truncation, extension, byte runs,
number splices such as 1e309, -1, 2^64, {} and [], header-size changes) and runs the verb on
each mutant in a scratch directory. Every run is classified:

  crash      killed by a signal, exit 134/139, exit 3 (internal error), a sanitizer report,
             or no exit within the time limit
  destroyed  an input file changed (content hash before/after)
  wrong      the mutation is one that must be refused (a tensor header whose sizes no longer
             match the data) and the verb exited 0
  clean      exit 0, 1 or 2 with nothing of the above; exit 2 must print exactly one
             "error:" line on stderr (else counted as `noisy`)

  bench/fuzz/mutation_campaign.py --binary build/bin/trainscope --count 3000 [--json OUT]
Exit 1 when any crash, destroyed input or wrong result was found (examples are kept under
--keep DIR).
"""
import argparse, glob, hashlib, json, os, random, shutil, subprocess, sys, tempfile, time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPLICES = [b"1e309", b"-1e309", b"-1", b"0", b"18446744073709551616", b"-9223372036854775809",
           b"{}", b"[]", b"null", b"\"x\"", b"true", b"1.5", b"NaN", b"\xff\xfe", b"\"\\ud800\"",
           b"99999999999999999999999", b"4294967296", b"-2147483649"]


def fixtures():
    """(kind, list of fixture paths, argv builder). Paths are copied into a scratch dir."""
    g = lambda p: sorted(f for f in glob.glob(os.path.join(SRC, p), recursive=True) if os.path.isfile(f))
    return [
        ("trace", g("tests/data/trace/*.json"), lambda f: ["trace", "analyze", f[0], "--json"]),
        ("phases", g("tests/data/trace/phases/**/*.jsonl"), lambda f: ["trace", "analyze", f[0], "--json"]),
        ("jsonl", g("tests/data/data/*.jsonl") + g("tests/data/train/*.jsonl"),
         lambda f: ["data", "scan", f[0], "--json"]),
        ("text", g("tests/data/data/*.txt"), lambda f: ["data", "scan", f[0], "--blocks", "--json"]),
        ("megatron", [p for p in g("tests/data/data/*.idx")], lambda f: ["data", "scan", f[0], "--json"]),
        ("npy", g("tests/data/data/*.npy"), lambda f: ["data", "stats", f[0], "--json"]),
        ("safetensors", g("tests/data/data/*.safetensors"), lambda f: ["data", "stats", f[0], "--json"]),
        ("csv", g("tests/data/data/*.csv"), lambda f: ["data", "stats", f[0], "--json"]),
        ("fingerprint", g("tests/data/env/fp_*.json"), lambda f: ["env", "check", f[0], "--json"]),
        ("fingerprint_diff", g("tests/data/env/fp_nvidia_a.json"),
         lambda f: ["env", "diff", f[0], os.path.join(SRC, "tests/data/env/fp_nvidia_b.json"), "--json"]),
        ("train_config", g("tests/data/train/tiny_config.json"),
         lambda f: ["train", "--config", f[0], "--steps", "2", "--max-seconds", "20", "--json"]),
    ]


def mutate(data, rng, kind):
    """Returns (mutant bytes, name of the mutation, must_refuse)."""
    ops = ["flip", "truncate", "extend", "run", "splice", "delete", "dup"]
    if kind in ("npy", "safetensors"):
        ops += ["size", "size", "size"]
    op = rng.choice(ops)
    d = bytearray(data)
    n = len(d)
    if n == 0:
        return bytes(rng.choice(SPLICES)), "splice", False
    if op == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(n)
            d[i] ^= 1 << rng.randrange(8)
        return bytes(d), op, False
    if op == "truncate":
        return bytes(d[:rng.randrange(n)]), op, False
    if op == "extend":
        return bytes(d) + os.urandom(rng.randint(1, 64)), op, False
    if op == "run":
        i = rng.randrange(n)
        return bytes(d[:i]) + bytes([rng.randrange(256)]) * rng.randint(1, 4096) + bytes(d[i:]), op, False
    if op == "delete":
        i = rng.randrange(n)
        return bytes(d[:i] + d[i + rng.randint(1, 64):]), op, False
    if op == "dup":
        i = rng.randrange(n)
        j = min(n, i + rng.randint(1, 256))
        return bytes(d[:j] + d[i:j] + d[j:]), op, False
    if op == "splice":
        # Replace a number or a token-ish span with an extreme value.
        digits = [i for i in range(n) if 48 <= d[i] <= 57]
        i = rng.choice(digits) if digits and rng.random() < 0.8 else rng.randrange(n)
        j = i
        while j < n and (48 <= d[j] <= 57 or d[j] in b".-+eE"):
            j += 1
        j = max(j, i + 1)
        return bytes(d[:i]) + rng.choice(SPLICES) + bytes(d[j:]), op, False
    # "size": the data section no longer matches the header (tensor formats only): drop or
    # add whole elements' worth of bytes at the end, which a reader must refuse.
    delta = rng.choice([-8, -4, -2, -1, 1, 4, 8, 64])
    if delta < 0:
        return bytes(d[:max(0, n + delta)]), "size", True
    return bytes(d) + b"\0" * delta, "size", True


_ACCEPTED = {}


def accepted(src, kind, argv_of, binary=None):
    """Whether the unmutated fixture is accepted (exit 0 or 1) by its verb; cached."""
    if (src, kind) not in _ACCEPTED:
        work = tempfile.mkdtemp(prefix="ts_seed_")
        try:
            target = os.path.join(work, os.path.basename(src))
            shutil.copy(src, target)
            p = subprocess.run([_BINARY[0]] + argv_of([target]), capture_output=True, cwd=work, timeout=120)
            _ACCEPTED[(src, kind)] = p.returncode in (0, 1)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return _ACCEPTED[(src, kind)]


_BINARY = [None]


def digest(paths):
    h = {}
    for p in paths:
        try:
            with open(p, "rb") as f:
                h[p] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            h[p] = None
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(SRC, "build", "bin", "trainscope"))
    ap.add_argument("--count", type=int, default=3000, help="mutants in all (spread over the kinds)")
    ap.add_argument("--train-count", type=int, default=40, help="trainer configs among them (slow)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--keep", default="", help="directory for the inputs of findings")
    ap.add_argument("--json", default="", help="write the summary here")
    a = ap.parse_args()
    a.binary = os.path.abspath(a.binary)  # runs happen in scratch directories
    _BINARY[0] = a.binary
    rng = random.Random(a.seed)
    kinds = [k for k in fixtures() if k[1]]
    fast = [k for k in kinds if k[0] != "train_config"]
    plan = [("train_config", None)] * min(a.train_count, a.count // 10)
    plan = [k for k in kinds if k[0] == "train_config"] * len(plan)
    per = max(1, (a.count - len(plan)) // len(fast))
    plan = [k for k in fast for _ in range(per)] + plan
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1", ASAN_OPTIONS="detect_leaks=0")
    totals = {"runs": 0, "clean": 0, "crash": 0, "destroyed": 0, "wrong": 0, "noisy": 0}
    by_kind = {}
    examples = []
    keep = a.keep or tempfile.mkdtemp(prefix="ts_mutation_findings_")
    os.makedirs(keep, exist_ok=True)
    t0 = time.time()
    for n, (kind, paths, argv_of) in enumerate(plan):
        src = rng.choice(paths)
        work = tempfile.mkdtemp(prefix="ts_mut_")
        try:
            name = os.path.basename(src)
            target = os.path.join(work, name)
            with open(src, "rb") as f:
                data = f.read()
            mutant, op, must_refuse = mutate(data, rng, kind)
            # A header/size mismatch must be refused only when the seed itself was valid
            # (fixtures of bad files, e.g. trailing bytes, may become valid by the mutation).
            must_refuse = must_refuse and accepted(src, kind, argv_of)
            with open(target, "wb") as f:
                f.write(mutant)
            inputs = [target]
            if kind == "megatron":  # the .bin travels with its index, unmutated or mutated
                binf = src[:-4] + ".bin"
                shutil.copy(binf, os.path.join(work, name[:-4] + ".bin"))
                inputs.append(os.path.join(work, name[:-4] + ".bin"))
            if kind == "train_config":  # corpus paths in the config are relative to it
                for extra in glob.glob(os.path.join(os.path.dirname(src), "tiny*")):
                    if extra != src:
                        shutil.copy(extra, work)
            before = digest(inputs)
            argv = [a.binary] + argv_of(inputs)
            if kind == "train_config":
                argv += ["--run-dir", os.path.join(work, "run")]
            try:
                p = subprocess.run(argv, capture_output=True, env=env, timeout=a.timeout, cwd=work)
                rc, err = p.returncode, p.stderr.decode(errors="replace")
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            after = digest(inputs)
            verdict = "clean"
            if rc == "timeout" or rc < 0 or rc in (3, 134, 139) or rc > 3 or "Sanitizer" in err \
                    or "runtime error:" in err:
                verdict = "crash"
            elif before != after:
                verdict = "destroyed"
            elif must_refuse and rc == 0:
                verdict = "wrong"
            elif rc == 2 and sum(1 for l in err.splitlines() if "error:" in l) != 1:
                verdict = "noisy"
            totals["runs"] += 1
            totals[verdict] += 1
            by_kind.setdefault(kind, {}).setdefault(verdict, 0)
            by_kind[kind][verdict] += 1
            if verdict == "clean":
                by_kind[kind].setdefault(f"exit{rc}", 0)
                by_kind[kind][f"exit{rc}"] += 1
            if verdict != "clean":
                kept = os.path.join(keep, f"{kind}-{verdict}-{n}-{name}")
                with open(kept, "wb") as f:
                    f.write(mutant)
                if len(examples) < 50:
                    examples.append({"kind": kind, "verdict": verdict, "mutation": op, "exit": rc,
                                     "input": kept, "stderr": err.strip().splitlines()[-3:]})
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if sys.stderr.isatty() or (n + 1) % 250 == 0:
            print(f"\r{n + 1}/{len(plan)} mutants, {totals['crash']} crash, {totals['destroyed']} destroyed, "
                  f"{totals['wrong']} wrong", end="" if sys.stderr.isatty() else "\n", file=sys.stderr, flush=True)
    summary = {"format": "trainscope.mutation_campaign", "version": 1, "seed": a.seed,
               "elapsed_s": round(time.time() - t0, 1), "totals": totals, "by_kind": by_kind,
               "examples": examples, "kept": keep}
    print()
    print(f"{'kind':<18} {'runs':>6} {'clean':>6} {'(exit 0':>7} {'1':>5} {'2)':>6} {'crash':>6} {'destroyed':>9} "
          f"{'wrong':>6} {'noisy':>6}")
    for k, v in sorted(by_kind.items()):
        runs = sum(n for key, n in v.items() if not key.startswith("exit"))
        print(f"{k:<18} {runs:>6} {v.get('clean', 0):>6} {v.get('exit0', 0):>7} {v.get('exit1', 0):>5} "
              f"{v.get('exit2', 0):>6} {v.get('crash', 0):>6} {v.get('destroyed', 0):>9} {v.get('wrong', 0):>6} "
              f"{v.get('noisy', 0):>6}")
    print(f"{'all':<18} {totals['runs']:>6} {totals['clean']:>6} {'':>7} {'':>5} {'':>6} {totals['crash']:>6} "
          f"{totals['destroyed']:>9} {totals['wrong']:>6} {totals['noisy']:>6}")
    for e in examples[:15]:
        print(f"  {e['kind']} {e['verdict']} ({e['mutation']}, exit {e['exit']}): {e['input']}: "
              f"{' | '.join(e['stderr'])[:200]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if totals["crash"] or totals["destroyed"] or totals["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
