#!/usr/bin/python3
"""`data scan --distributed` and `data clean --distributed` against the single-process scan.

Builds a small corpus with planted exact, normalised and near duplicates, noise and bad
records, spread over inputs that are split by byte ranges (uncompressed JSONL) and read
whole (.gz, plain text). Then, for each world size, runs the scan under `trainscope launch -n
N` (gloo) and, when the MPI backend is built and mpirun exists, under mpirun; and checks:
  - the --json report equals the single-process one field by field (but wall_s);
  - the --verdicts file is byte-identical;
  - clean --distributed: the ranks' outputs, concatenated in rank order, equal the
    single-process clean output, and so does the --merge output.
Exit 0 when everything matches; otherwise prints the first difference and exits 1.
"""
import argparse, gzip, json, os, random, shutil, subprocess, sys, tempfile


def make_corpus(d, seed=7):
    rng = random.Random(seed)
    vocab = ["w%d%s" % (i, rng.choice("abcdefgh")) for i in range(3000)]

    def fresh():
        n = rng.randint(40, 160)
        words = [rng.choice(vocab) for _ in range(n)]
        # Sentences, so the C4 and Gopher rules see ordinary text.
        out = []
        for i, w in enumerate(words):
            out.append(w + ("." if i % 12 == 11 else ""))
        return " ".join(out) + "."

    docs = []  # (text, id or None)
    planted = {"exact": 0, "norm": 0, "near": 0}
    for i in range(1400):
        r = rng.random()
        if docs and r < 0.10:
            docs.append((rng.choice(docs)[0], None))
            planted["exact"] += 1
        elif docs and r < 0.14:
            t = rng.choice(docs)[0]
            docs.append(("  " + t.upper() + " ", None))
            planted["norm"] += 1
        elif docs and r < 0.24:
            words = rng.choice(docs)[0].split(" ")
            k = rng.randrange(len(words))
            words[k] = rng.choice(vocab)
            docs.append((" ".join(words), None))
            planted["near"] += 1
        elif r < 0.26:
            docs.append(("short", None))
        else:
            docs.append((fresh(), None))
        if rng.random() < 0.3:
            docs[-1] = (docs[-1][0], "doc-%d" % i)

    def jsonl_line(t, i):
        rec = {"text": t}
        if i is not None:
            rec["id"] = i
        return json.dumps(rec)

    # a.jsonl (most documents, cut into ranges), b.jsonl.gz (whole), c.txt (whole, one
    # document per line), d.jsonl (cut too); a bad record and a blank line in a and d.
    parts = [docs[:700], docs[700:900], docs[900:1000], docs[1000:]]
    with open(os.path.join(d, "a.jsonl"), "w") as f:
        for k, (t, i) in enumerate(parts[0]):
            f.write(jsonl_line(t, i) + "\n")
            if k == 333:
                f.write("{not json\n")
            if k == 501:
                f.write("\n")
    with gzip.open(os.path.join(d, "b.jsonl.gz"), "wt") as f:
        for t, i in parts[1]:
            f.write(jsonl_line(t, i) + "\n")
    with open(os.path.join(d, "c.txt"), "w") as f:
        for t, _ in parts[2]:
            f.write(t + "\n")
    with open(os.path.join(d, "d.jsonl"), "w") as f:
        for k, (t, i) in enumerate(parts[3]):
            f.write(jsonl_line(t, i) + "\n")
            if k == 17:
                f.write('{"text": 5}\n')
    return [os.path.join(d, n) for n in ("a.jsonl", "b.jsonl.gz", "c.txt", "d.jsonl")], planted


def run(cmd, env, expect=(0, 1)):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    if p.returncode not in expect:
        sys.stderr.write("command failed (%d): %s\n%s\n%s\n" %
                         (p.returncode, " ".join(cmd), p.stdout[-3000:], p.stderr[-3000:]))
        sys.exit(1)
    return p


def strip(j):
    j = dict(j)
    j.pop("wall_s", None)
    j.pop("distributed", None)  # only the distributed scan has it
    return j


def diff(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return "%s.%s: present on one side only" % (path, k)
            d = diff(a[k], b[k], path + "." + k)
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "%s: %d vs %d entries" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: %r vs %r" % (path, a, b)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--ranks", default="1,2,3")
    ap.add_argument("--mpi", action="store_true", help="also run under mpirun (mpi backend)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ts_dist_")
    env = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
    failures = []
    try:
        inputs, planted = make_corpus(tmp)
        scan_args = ["data", "scan"] + inputs + ["--json", "--fail-on", "none", "--threads", "2"]
        single_v = os.path.join(tmp, "single.verdicts.jsonl")
        single = json.loads(run([args.binary] + scan_args + ["--verdicts", single_v], env).stdout)
        if not (single["exact_duplicate_docs"] >= planted["exact"] // 2 and
                single["near_duplicate_docs"] >= planted["near"] // 2):
            failures.append("the corpus has too few duplicates: exact %d, near %d" %
                            (single["exact_duplicate_docs"], single["near_duplicate_docs"]))
        single_clean = os.path.join(tmp, "single.clean.jsonl")
        run([args.binary, "data", "clean"] + inputs + ["-o", single_clean, "--threads", "2"], env)

        runners = [("gloo", int(n)) for n in args.ranks.split(",")]
        if args.mpi:
            runners += [("mpi", int(n)) for n in args.ranks.split(",")]
        for backend, n in runners:
            tag = "%s-%d" % (backend, n)
            if backend == "gloo":
                pre = [args.binary, "launch", "-n", str(n), "-q", "--run-dir",
                       os.path.join(tmp, "run-" + tag), "--"]
            else:
                pre = [shutil.which("mpirun"), "-np", str(n), "--oversubscribe",
                       "--allow-run-as-root"]
            dist = ["--distributed", "--comm-backend", backend]
            v = os.path.join(tmp, tag + ".verdicts.jsonl")
            out = os.path.join(tmp, tag + ".scan.json")
            # Rank 0's report: the launcher's log of rank 0 (gloo) or mpirun's stdout, where
            # only rank 0 prints.
            p = run(pre + [args.binary] + scan_args + dist + ["--verdicts", v], env)
            text = p.stdout
            if backend == "gloo":
                text = read(os.path.join(tmp, "run-" + tag, "rank0", "stdout.log")).decode()
            got = json.loads(text)
            if got.get("distributed", {}).get("ranks") != n:
                failures.append("%s: the report does not say %d ranks" % (tag, n))
            d = diff(strip(single), strip(got))
            if d:
                failures.append("%s scan: %s" % (tag, d))
            if read(v) != read(single_v):
                failures.append("%s: verdicts differ from the single-process scan" % tag)
            co = os.path.join(tmp, tag + ".clean.jsonl")
            run(pre + [args.binary, "data", "clean"] + inputs + ["-o", co, "--threads", "2"] + dist, env)
            joined = b"".join(read(os.path.join(tmp, "%s.clean.rank%d.jsonl" % (tag, r)))
                              for r in range(n))
            if joined != read(single_clean):
                failures.append("%s clean: the ranks' outputs differ from the single clean" % tag)
            cm = os.path.join(tmp, tag + ".merged.jsonl")
            run(pre + [args.binary, "data", "clean"] + inputs +
                ["-o", cm, "--threads", "2", "--merge"] + dist, env)
            if read(cm) != read(single_clean):
                failures.append("%s clean --merge: output differs from the single clean" % tag)
            print("%s: %s" % (tag, "ok" if not failures else "FAILED"))
        # An input missing on one node (here: rank 1 is given a path that does not exist):
        # the job stops, and the error names the rank, its host and the file.
        missing = os.path.join(tmp, "missing.jsonl")
        inner = ('exec %s data scan "$( [ "$RANK" = 1 ] && echo %s || echo %s )" --distributed '
                 '--fail-on none' % (args.binary, missing, inputs[0]))
        p = subprocess.run([args.binary, "launch", "-n", "2", "-q", "--run-dir",
                            os.path.join(tmp, "run-missing"), "--", "/bin/sh", "-c", inner],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        err = read(os.path.join(tmp, "run-missing", "rank1", "stderr.log")).decode()
        if p.returncode == 0 or "rank 1 on " not in err or missing not in err:
            failures.append("missing input on rank 1: exit %d, rank 1 said %r" % (p.returncode, err))
        print("missing input on one rank: %s" % ("ok" if not failures else "FAILED"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
