#!/usr/bin/python3
"""Mutation campaign: thousands of damaged inputs through the real CLI, as a hostile user would.

For each parser the CLI exposes it takes the test fixtures in tests/data/, applies seeded
mutations (bit flips, truncation, extension, byte runs, number splices such as 1e309, -1,
2^64, {} and [], a JSON member's value of another type, values nested 200 to 100000 deep,
header-size changes) and runs the verb on each mutant in a scratch directory:

  files        Chrome traces, phase logs, JSONL/text corpora, Megatron .idx/.bin, .npy,
               safetensors, CSV, environment fingerprints and the compatibility matrix,
               trainer configs (train, plan), TensorBoard event files, trainer_state.json,
               Megatron logs, metrics JSONL/CSV, diagnose rule files, tokenizer.json
               (data scan --tokenizer), nvidia-smi/npu-smi topology (topo, plan --topo),
               selftest comm results (plan --comm), a trace analysis (plan --trace),
               checkpoints' safetensors (ckpt verify)
  directories  flight recorder dumps (JSON and pickle) and run directories (hang analyze),
               trainscope step-<N> checkpoints, HuggingFace sharded folders and
               torch.distributed.checkpoint folders (ckpt verify|inspect|diff), trace folders
               (Ascend, execution traces), phase metrics (plan --trace), and a run directory
               with every part (metrics, TensorBoard, hang, data scan, checkpoints,
               fingerprint, doctor report: diagnose, report): the directory is copied, one of
               its files mutated
Every run is classified:

  crash      killed by a signal, exit 134/139, exit 3 (internal error), a sanitizer report,
             or no exit within the time limit
  destroyed  an input file changed (content hash before/after), or, for a directory input,
             a file of the copy changed, vanished or appeared (the verb's own outputs aside:
             report's RUN_DIR/report.html)
  wrong      the mutation is one that must be refused and the verb exited 0: a tensor header
             whose sizes no longer match the data, a file of a trainscope checkpoint listed
             in its manifest (xxh3) changed under `ckpt verify`
  clean      exit 0, 1 or 2 with nothing of the above; exit 2 must print exactly one
             "error:" line on stderr (else counted as `noisy`)

  bench/fuzz/mutation_campaign.py --binary build/bin/trainscope --count 3000 [--json OUT]
  bench/fuzz/mutation_campaign.py --per-kind 20 --train-count 0      (the ctest mutation_campaign_short)
Exit 1 when any crash, destroyed input or wrong result was found (examples are kept under
--keep DIR: the mutant file, or the whole mutated directory copy).
"""
import argparse, glob, hashlib, json, os, random, shutil, subprocess, sys, tempfile, time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(SRC, "tests", "data")
RETYPES = [b"5", b"-1", b"1e309", b"\"s\"", b"\"\"", b"true", b"null", b"[]", b"{}", b"[1]",
           b"{\"a\": 1}", b"18446744073709551616"]
SPLICES = [b"1e309", b"-1e309", b"-1", b"0", b"18446744073709551616", b"-9223372036854775809",
           b"{}", b"[]", b"null", b"\"x\"", b"true", b"1.5", b"NaN", b"\xff\xfe", b"\"\\ud800\"",
           b"99999999999999999999999", b"4294967296", b"-2147483649"]


class Kind:
    """One parser behind one verb: seeds (files, or directories when is_dir), argv builder
    (gets the list of inputs, the mutated copy first), the output files a verb may write into
    a directory input, and which damage the verb owes a refusal (exit 1 or 2) for: `tensors`
    a tensor file whose data no longer matches its header, `manifest` a changed file listed in
    a trainscope checkpoint's manifest (xxh3), `distcp` a truncated .distcp file (every byte
    is some chunk's), `crc` a bit flip in a TensorBoard event file (CRC-32C per record: exit 2
    or a run with bad_records > 0)."""

    def __init__(self, name, seeds, argv_of, is_dir=False, outputs=(), tensors=False, manifest=False,
                 distcp=False, crc=False):
        self.name, self.seeds, self.argv_of = name, seeds, argv_of
        self.is_dir, self.outputs = is_dir, set(outputs)
        self.tensors, self.manifest, self.distcp, self.crc = tensors, manifest, distcp, crc


def g(pattern, dirs=False):
    hits = glob.glob(os.path.join(DATA, pattern), recursive=True)
    return sorted(p for p in hits if (os.path.isdir(p) if dirs else os.path.isfile(p)))


def d(rel):
    return os.path.join(DATA, rel)


def build_run_dir(root):
    """A run directory with every part diagnose and report read (core/run_dir.h), made from
    the fixtures: per-rank metrics, TensorBoard scalars, flight recorder dumps and stacks, a
    data scan report, checkpoints, a fingerprint and a doctor report."""
    run = os.path.join(root, "run_all")
    shutil.copytree(d("report/spike_run/train"), os.path.join(run, "train"))
    shutil.copytree(d("diagnose/healthy_s2.tb"), os.path.join(run, "train", "tb", "rank0"))
    shutil.copytree(d("hang/run_dir/hang"), os.path.join(run, "hang"))
    os.makedirs(os.path.join(run, "data"))
    shutil.copy(d("diagnose/duplicate_scan.json"), os.path.join(run, "data", "scan.json"))
    shutil.copytree(d("ckpt/run/checkpoints/step-10"), os.path.join(run, "checkpoints", "step-10"))
    shutil.copy(d("env/fp_nvidia_a.json"), os.path.join(run, "fingerprint.json"))
    shutil.copy(os.path.join(SRC, "tests/golden/doctor/all_skipped.expected.json"),
                os.path.join(run, "report.json"))
    return run


def trace_analysis(scratch, binary):
    """A `trace analyze --json` result of the 2-rank DDP traces (plan --trace reads it)."""
    out = os.path.join(scratch, "analysis.json")
    p = subprocess.run([binary, "trace", "analyze", d("trace/ddp_rank0.pt.trace.json"),
                        d("trace/ddp_rank1.pt.trace.json"), "--json"], capture_output=True, timeout=120)
    with open(out, "wb") as f:
        f.write(p.stdout)
    return [out] if p.returncode in (0, 1) and p.stdout else []


def fixtures(scratch, binary):
    """Every Kind; scratch holds seeds made at start (the composite run directory, a trace
    analysis made by the binary)."""
    small = d("data/small.jsonl")
    dp_tiny = d("train/dp_tiny.json")
    plan = ["plan", "--devices", "8", "--device-memory", "80", "--json"]
    diag = lambda f: ["diagnose", f[0], "--json"]
    run_all = build_run_dir(scratch)
    return [
        Kind("trace", g("trace/*.json"), lambda f: ["trace", "analyze", f[0], "--json"]),
        Kind("phases", g("trace/phases/**/*.jsonl"), lambda f: ["trace", "analyze", f[0], "--json"]),
        Kind("trace_dir", [d("trace/ascend/node0_123_ascend_pt"), d("trace/et"), d("trace/mixed_dir")],
             lambda f: ["trace", "analyze", f[0], "--json"], is_dir=True),
        Kind("jsonl", g("data/*.jsonl") + g("train/*.jsonl"), lambda f: ["data", "scan", f[0], "--json"]),
        Kind("text", g("data/*.txt"), lambda f: ["data", "scan", f[0], "--blocks", "--json"]),
        Kind("megatron", g("data/*.idx"), lambda f: ["data", "scan", f[0], "--json"]),
        Kind("npy", g("data/*.npy"), lambda f: ["data", "stats", f[0], "--json"], tensors=True),
        Kind("safetensors", g("data/*.safetensors"), lambda f: ["data", "stats", f[0], "--json"], tensors=True),
        Kind("csv", g("data/*.csv"), lambda f: ["data", "stats", f[0], "--json"]),
        Kind("tokenizer", g("tokenizer/*.json"),
             lambda f: ["data", "scan", small, "--tokenizer", f[0], "--json"]),
        Kind("fingerprint", g("env/fp_*.json"), lambda f: ["env", "check", f[0], "--json"]),
        Kind("fingerprint_diff", [d("env/fp_nvidia_a.json")],
             lambda f: ["env", "diff", f[0], d("env/fp_nvidia_b.json"), "--json"]),
        Kind("env_matrix", [os.path.join(SRC, "data/compat_matrix.json"), d("env/matrix_bad_type.json")],
             lambda f: ["env", "check", d("env/fp_nvidia_a.json"), "--matrix", f[0], "--json"]),
        Kind("topo", g("topo/*.txt"), lambda f: ["topo", "--from", f[0], "--tp", "2", "--json"]),
        Kind("plan_config", g("plan/mem_*.json") + [dp_tiny], lambda f: plan + ["--config", f[0]]),
        Kind("plan_comm", [d("plan/selftest_comm_gloo2.json")],
             lambda f: ["plan", "--config", dp_tiny, "--devices", "2", "--device-memory", "1",
                        "--micro-batch", "4", "--comm", f[0], "--json"]),
        Kind("plan_topo", [d("topo/dgx1_v100_nvlink.txt"), d("topo/ascend_910b_8npu.txt")],
             lambda f: plan + ["--config", dp_tiny, "--tp", "1,2,8", "--topo", f[0]]),
        Kind("plan_trace", [d("plan/comm_bound")],
             lambda f: ["plan", "--config", dp_tiny, "--devices", "4", "--device-memory", "1",
                        "--micro-batch", "4", "--trace", f[0], "--json"], is_dir=True),
        Kind("plan_trace_json", trace_analysis(scratch, binary),
             lambda f: ["plan", "--config", dp_tiny, "--devices", "4", "--device-memory", "1",
                        "--micro-batch", "4", "--trace", f[0], "--json"]),
        Kind("tensorboard", g("tb/*.tfevents*") + g("diagnose/*.tb/events.out.tfevents.*"), diag, crc=True),
        Kind("trainer_state", g("diagnose/*/trainer_state.json"), diag),
        Kind("megatron_log", g("diagnose/*.megatron.log"), diag),
        Kind("metrics_csv", g("diagnose/*.csv"), diag),
        Kind("metrics_jsonl", g("diagnose/*.jsonl") + g("diagnose/*.rundir/train/*.jsonl"), diag),
        Kind("diagnose_rules", [os.path.join(SRC, "data/diagnose/rules.json")],
             lambda f: ["diagnose", "--rules", f[0], d("diagnose/healthy_s1.csv"), "--json"]),
        Kind("fr_json", [p for p in g("hang/*", dirs=True) if "pickle" not in p and "run_dir" not in p],
             lambda f: ["hang", "analyze", f[0], "--json"], is_dir=True),
        Kind("fr_pickle", g("hang/pickle_*", dirs=True) + [d("pickle/fr_skipped")],
             lambda f: ["hang", "analyze", f[0], "--json"], is_dir=True),
        Kind("hang_run_dir", [d("hang/run_dir")], lambda f: ["hang", "analyze", f[0], "--json"], is_dir=True),
        Kind("ckpt_verify", [d("ckpt/run"), d("ckpt/bad_json")],
             lambda f: ["ckpt", "verify", f[0], "--json"], is_dir=True, tensors=True, manifest=True),
        Kind("ckpt_diff", [d("ckpt/run/checkpoints/step-10")],
             lambda f: ["ckpt", "diff", f[0], d("ckpt/run/checkpoints/step-20"), "--json"], is_dir=True),
        Kind("ckpt_sharded", [d("ckpt/sharded")], lambda f: ["ckpt", "verify", f[0], "--json"], is_dir=True,
             tensors=True),
        Kind("ckpt_safetensors", g("ckpt/*.safetensors"), lambda f: ["ckpt", "verify", f[0], "--json"],
             tensors=True),
        Kind("dcp_inspect", [d("ckpt/dcp"), d("pickle/dcp"), d("pickle/dcp_bad")],
             lambda f: ["ckpt", "inspect", f[0], "--json"], is_dir=True),
        Kind("dcp_verify", [d("ckpt/dcp"), d("pickle/dcp"), d("pickle/dcp_bad")],
             lambda f: ["ckpt", "verify", f[0], "--json"], is_dir=True, distcp=True),
        Kind("diagnose_run_dir", [run_all] + g("diagnose/*.rundir", dirs=True), diag, is_dir=True),
        Kind("report", [run_all, d("report/spike_run")], lambda f: ["report", f[0], "--json"],
             is_dir=True, outputs=["report.html"]),
        Kind("train_config", [d("train/tiny_config.json")],
             lambda f: ["train", "--config", f[0], "--steps", "2", "--max-seconds", "20", "--json"]),
    ]


TENSOR_EXT = (".npy", ".safetensors")


def json_value_end(d, j):
    """The end of the JSON value starting at d[j] (a string, an array or object with its
    brackets balanced, or a scalar up to the next delimiter); len(d) if it never ends."""
    n, k = len(d), j
    if k < n and d[k] == 34:
        k += 1
        while k < n and d[k] != 34:
            k += 2 if d[k] == 92 else 1
        return min(n, k + 1)
    if k < n and d[k] in b"[{":
        depth, in_str = 0, False
        while k < n:
            c = d[k]
            if in_str:
                k += 1 if c != 92 else 2
                in_str = c != 34
                continue
            in_str = c == 34
            depth += 1 if c in b"[{" else -1 if c in b"]}" else 0
            k += 1
            if depth == 0:
                return k
        return n
    while k < n and d[k] not in b",}]\r\n":
        k += 1
    return k


def mutate(data, rng, path):
    """Returns (mutant bytes, name of the mutation, must_refuse)."""
    ops = ["flip", "truncate", "extend", "run", "splice", "delete", "dup", "nest"]
    if b'":' in data:
        ops += ["retype", "retype"]
    if path.endswith(TENSOR_EXT):
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
        return bytes(d) + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))), op, False
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
    if op == "retype":
        # A JSON member's value replaced by one of another type ("format": 5, "version": []):
        # the whole value after a random `":` (a string, a bracketed value, or a scalar).
        keys = [i for i in range(n - 1) if d[i] == 34 and d[i + 1] == 58]
        j = rng.choice(keys) + 2
        while j < n and d[j] in b" \t\r\n":
            j += 1
        return bytes(d[:j]) + rng.choice(RETYPES) + bytes(d[json_value_end(d, j):]), op, False
    if op == "nest":
        # A deeply nested value where a number or any byte was: a recursive reader's stack.
        digits = [i for i in range(n) if 48 <= d[i] <= 57]
        i = rng.choice(digits) if digits and rng.random() < 0.8 else rng.randrange(n)
        o, c = rng.choice([(b"[", b"]"), (b"{\"a\":", b"}")])
        depth = rng.choice([200, 1000, 10000, 100000])
        return bytes(d[:i]) + o * depth + b"1" + c * depth + bytes(d[i + 1:]), op, False
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


def accepted(src, kind, binary):
    """Whether the unmutated seed is accepted (exit 0 or 1) by its verb; cached."""
    if (src, kind.name) not in _ACCEPTED:
        work = tempfile.mkdtemp(prefix="ts_seed_")
        try:
            p = subprocess.run([binary] + kind.argv_of(stage(kind, src, work)), capture_output=True, cwd=work,
                               timeout=120)
            _ACCEPTED[(src, kind.name)] = p.returncode in (0, 1)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return _ACCEPTED[(src, kind.name)]


def tree_files(root):
    out = []
    for base, _, names in os.walk(root):
        out += [os.path.join(base, n) for n in names]
    return sorted(out)


def digest(paths):
    h = {}
    for p in paths:
        try:
            with open(p, "rb") as f:
                h[p] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            h[p] = None
    return h


def in_manifest(target_dir, mutated):
    """Whether `mutated` is listed in the manifest.json of its own folder (a trainscope
    checkpoint), so that any change of its bytes must fail `ckpt verify`."""
    try:
        with open(os.path.join(os.path.dirname(mutated), "manifest.json")) as f:
            m = json.load(f)
        return any(e.get("path") == os.path.basename(mutated) for e in m.get("files", []))
    except (OSError, ValueError, AttributeError):
        return False


def pick_file(files, rng):
    """The file of a directory to mutate: the index a folder's format hangs on (a DCP
    `.metadata`, a sharded `*.index.json`, a `manifest.json`) half of the time when there is
    one, else any file."""
    index = [f for f in files if os.path.basename(f) in (".metadata", "manifest.json")
             or f.endswith(".index.json")]
    return rng.choice(index if index and rng.random() < 0.5 else files)


def stage(kind, src, work):
    """Copies the seed (file or directory) and what travels with it into work; returns the
    verb's inputs, the copy first."""
    target = os.path.join(work, os.path.basename(src))
    (shutil.copytree if kind.is_dir else shutil.copy)(src, target)
    inputs = [target]
    if kind.name == "megatron":  # the .bin travels with its index, unmutated
        shutil.copy(src[:-4] + ".bin", target[:-4] + ".bin")
        inputs.append(target[:-4] + ".bin")
    if kind.name == "train_config":  # corpus paths in the config are relative to it
        for extra in glob.glob(os.path.join(os.path.dirname(src), "tiny*")):
            if extra != src:
                shutil.copy(extra, work)
    return inputs


def prepare(kind, src, work, rng, binary):
    """Copies the seed into work and mutates it (one file of a directory). Returns
    (inputs, watched paths, mutated file, op, must_refuse, mutant bytes)."""
    inputs = stage(kind, src, work)
    target = inputs[0]
    victim = pick_file(tree_files(target), rng) if kind.is_dir else target
    with open(victim, "rb") as f:
        data = f.read()
    mutant, op, must_refuse = mutate(data, rng, victim)
    must_refuse = must_refuse and kind.tensors
    if mutant != data and ((kind.manifest and in_manifest(target, victim))
                           or (kind.distcp and op == "truncate" and victim.endswith(".distcp"))
                           or (kind.crc and op == "flip")):
        must_refuse = True
    # A refusal is owed only when the seed itself was valid (fixtures of bad files, e.g.
    # trailing bytes, may become valid by the mutation).
    must_refuse = must_refuse and accepted(src, kind, binary)
    with open(victim, "wb") as f:
        f.write(mutant)
    watched = tree_files(target) if kind.is_dir else inputs
    return inputs, watched, victim, op, must_refuse, mutant


def flagged(kind, rc, out):
    """Whether the verb refused the input: exit 1 or 2, or (TensorBoard) a run that counts
    bad records."""
    if not kind.crc:
        return rc != 0
    if rc == 2:
        return True
    try:
        return any(r.get("bad_records", 0) > 0 for r in json.loads(out).get("runs", []))
    except (ValueError, AttributeError):
        return False


def classify(kind, rc, out, err, before, after, must_refuse):
    if rc == "timeout" or rc < 0 or rc in (3, 134, 139) or rc > 3 or "Sanitizer" in err \
            or "runtime error:" in err:
        return "crash"
    if before != after:
        return "destroyed"
    if must_refuse and not flagged(kind, rc, out):
        return "wrong"
    if rc == 2 and sum(1 for l in err.splitlines() if "error:" in l) != 1:
        return "noisy"
    return "clean"


def run_one(kind, src, n, rng, a, env, keep):
    """One mutant through its verb: (verdict, rc, op, example or None)."""
    work = tempfile.mkdtemp(prefix="ts_mut_")
    try:
        inputs, watched, victim, op, must_refuse, mutant = prepare(kind, src, work, rng, a.binary)
        before = digest(watched)
        argv = [a.binary] + kind.argv_of(inputs)
        if kind.name == "train_config":
            argv += ["--run-dir", os.path.join(work, "run")]
        try:
            p = subprocess.run(argv, capture_output=True, env=env, timeout=a.timeout, cwd=work)
            rc, out, err = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, out, err = "timeout", "", ""
        if kind.is_dir:  # every file of the copy, and none new but the verb's own outputs
            now = [f for f in tree_files(inputs[0]) if os.path.basename(f) not in kind.outputs]
            after = digest(sorted(set(watched) | set(now)))
        else:
            after = digest(watched)
        verdict = classify(kind, rc, out, err, before, after, must_refuse)
        if verdict == "clean":
            return verdict, rc, op, None
        rel = os.path.relpath(victim, work)
        kept = os.path.join(keep, f"{kind.name}-{verdict}-{n}-{os.path.basename(src)}")
        if kind.is_dir:  # the whole mutated copy, as the verb saw it
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(inputs[0], kept)
        else:
            with open(kept, "wb") as f:
                f.write(mutant)
        changed = [os.path.relpath(p, work) for p in sorted(set(before) | set(after))
                   if before.get(p, "absent") != after.get(p, "absent")]
        argv_kept = [kept if x == inputs[0] else x for x in argv]
        return verdict, rc, op, {"kind": kind.name, "verdict": verdict, "mutation": op, "exit": rc,
                                 "input": kept, "mutated_file": rel, "changed": changed,
                                 "argv": argv_kept, "stderr": err.strip().splitlines()[-3:]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def make_plan(kinds, a):
    fast = [k for k in kinds if k.name != "train_config"]
    train = [k for k in kinds if k.name == "train_config"]
    if a.per_kind:
        n_train = min(a.train_count, a.per_kind) if train else 0
        per = a.per_kind
    else:
        n_train = min(a.train_count, a.count // 10) if train else 0
        per = max(1, (a.count - n_train) // len(fast))
    return [k for k in fast for _ in range(per)] + train * n_train


def print_table(by_kind, totals, examples):
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
        print(f"  {e['kind']} {e['verdict']} ({e['mutation']} of {e['mutated_file']}, exit {e['exit']}): "
              f"{e['input']}: {' | '.join(e['stderr'])[:200]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(SRC, "build", "bin", "trainscope"))
    ap.add_argument("--count", type=int, default=3000, help="mutants in all (spread over the kinds)")
    ap.add_argument("--per-kind", type=int, default=0, help="mutants per kind instead of --count")
    ap.add_argument("--kinds", default="", help="comma-separated kinds to run (default all)")
    ap.add_argument("--train-count", type=int, default=40, help="trainer configs among them (slow)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--keep", default="", help="directory for the inputs of findings")
    ap.add_argument("--json", default="", help="write the summary here")
    ap.add_argument("--check-seeds", action="store_true",
                    help="run every unmutated seed once and print its exit code and last stderr line")
    a = ap.parse_args()
    a.binary = os.path.abspath(a.binary)  # runs happen in scratch directories
    if not os.access(a.binary, os.X_OK):
        print(f"mutation_campaign: error: {a.binary}: not an executable", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    scratch = tempfile.mkdtemp(prefix="ts_campaign_seeds_")
    try:
        kinds = [k for k in fixtures(scratch, a.binary) if k.seeds]
        if a.kinds:
            want = set(a.kinds.split(","))
            unknown = want - {k.name for k in kinds}
            if unknown:
                print(f"mutation_campaign: error: unknown kind {sorted(unknown)[0]}", file=sys.stderr)
                return 2
            kinds = [k for k in kinds if k.name in want]
        return check_seeds(kinds, a) if a.check_seeds else campaign(kinds, a, rng)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_seeds(kinds, a):
    """Every seed unmutated: a campaign over seeds its verb refuses tests little."""
    for kind in kinds:
        for src in kind.seeds:
            work = tempfile.mkdtemp(prefix="ts_seed_")
            try:
                p = subprocess.run([a.binary] + kind.argv_of(stage(kind, src, work)), capture_output=True,
                                   cwd=work, timeout=a.timeout)
                last = (p.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
                print(f"{kind.name:<18} exit {p.returncode}  {os.path.relpath(src, SRC)}  {last[:150]}")
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return 0


def campaign(kinds, a, rng):
    plan = make_plan(kinds, a)
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1", ASAN_OPTIONS="detect_leaks=0")
    totals = {"runs": 0, "clean": 0, "crash": 0, "destroyed": 0, "wrong": 0, "noisy": 0}
    by_kind, examples, slowest_s = {}, [], {}
    keep = a.keep or tempfile.mkdtemp(prefix="ts_mutation_findings_")
    os.makedirs(keep, exist_ok=True)
    t0 = time.time()
    for n, kind in enumerate(plan):
        src = rng.choice(kind.seeds)
        t_run = time.time()
        verdict, rc, op, example = run_one(kind, src, n, rng, a, env, keep)
        slowest_s[kind.name] = round(max(slowest_s.get(kind.name, 0), time.time() - t_run), 2)
        totals["runs"] += 1
        totals[verdict] += 1
        counts = by_kind.setdefault(kind.name, {})
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "clean":
            counts[f"exit{rc}"] = counts.get(f"exit{rc}", 0) + 1
        elif len(examples) < 200:
            examples.append(example)
        if sys.stderr.isatty() or (n + 1) % 250 == 0:
            print(f"\r{n + 1}/{len(plan)} mutants, {totals['crash']} crash, {totals['destroyed']} destroyed, "
                  f"{totals['wrong']} wrong", end="" if sys.stderr.isatty() else "\n", file=sys.stderr, flush=True)
    summary = {"format": "trainscope.mutation_campaign", "version": 2, "seed": a.seed,
               "argv": sys.argv, "elapsed_s": round(time.time() - t0, 1), "totals": totals,
               "by_kind": by_kind, "slowest_s": slowest_s, "examples": examples, "kept": keep}
    print_table(by_kind, totals, examples)
    print("slowest mutant per kind (s, with copying): " +
          ", ".join(f"{k} {v}" for k, v in sorted(slowest_s.items(), key=lambda kv: -kv[1])[:8]))
    print(f"{totals['runs']} mutants in {summary['elapsed_s']} s; findings kept under {keep}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if totals["crash"] or totals["destroyed"] or totals["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
