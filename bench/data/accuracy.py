#!/usr/bin/python3
"""Accuracy of `trainscope data scan`: near duplicates and noise flags, on real text.

Near duplicates. The labelled set is Debian's own documentation: every
/usr/share/doc/*/copyright file and /usr/share/common-licenses text (they copy licence text
heavily, so real near duplicates abound), plus edited copies of a random sample (2-30% of
words replaced, deleted or inserted) to spread similarities over 0.5..1. Ground truth is the
exact Jaccard similarity of word 5-gram sets (same tokens as the scanner: lower-case, ASCII
punctuation separates words), computed by brute force over all pairs (pairs whose set sizes
differ by more than the threshold allows cannot reach it and are skipped exactly).
A document is a true duplicate when an earlier document has J >= 0.8; predicted when scan's
verdict has near_dup_of. Also reported: the share of predicted (doc, kept) pairs whose exact
J >= 0.8.

Noise flags. Clean English prose (licence paragraphs) and clean German/French/Spanish prose
(message catalogues in /usr/share/locale), then corrupted copies: cut mid-sentence
("truncated"), an English and a foreign document glued ("mixed_language"), a foreign
document's UTF-8 decoded as Latin-1 ("mojibake"). Precision and recall per flag.

Usage: bench/data/accuracy.py --binary build/bin/trainscope [--out results.json]
"""
import argparse, gettext, glob, json, os, random, re, subprocess, sys, tempfile

SEP = re.compile(r"[\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]+")


def shingles(text, n=5):
    toks = [t for t in SEP.split(text.lower()) if t]
    if not toks:
        return frozenset()
    if len(toks) < n:
        return frozenset([tuple(toks)])
    return frozenset(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))


def jaccard(a, b):
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def edit(text, rate, rng):
    words = text.split(" ")
    for _ in range(max(1, int(len(words) * rate))):
        op = rng.random()
        i = rng.randrange(len(words))
        if op < 0.4:
            words[i] = rng.choice(("data", "model", "licence", "software", "file"))
        elif op < 0.7 and len(words) > 2:
            del words[i]
        else:
            words.insert(i, rng.choice(("the", "new", "free", "other")))
    return " ".join(words)


def run_scan(binary, docs, extra):
    with tempfile.TemporaryDirectory() as d:
        corpus, verdicts = os.path.join(d, "c.jsonl"), os.path.join(d, "v.jsonl")
        with open(corpus, "w") as f:
            for i, t in enumerate(docs):
                f.write(json.dumps({"id": str(i), "text": t}) + "\n")
        p = subprocess.run([binary, "data", "scan", corpus, "--verdicts", verdicts, "--json"] + extra,
                           stdout=subprocess.DEVNULL, env=dict(os.environ, TRAINSCOPE_NO_PROGRESS="1"))
        if p.returncode not in (0, 1):  # 1: the scan found problems over its thresholds
            sys.exit("failed (%d): %s" % (p.returncode, binary))
        return [json.loads(l) for l in open(verdicts)]


def near_dup_accuracy(binary, threshold, rng):
    texts = []
    for p in sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            t = open(p, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        if 200 <= len(t) <= 40000:
            texts.append(t)
    base = list(texts)
    for t in rng.sample(base, min(400, len(base))):
        texts.append(edit(t, rng.choice((0.02, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3)), rng))
    rng.shuffle(texts)
    sets = [shingles(t) for t in texts]
    n = len(texts)
    truth_dup = [False] * n
    truth_pairs = 0
    order = sorted(range(n), key=lambda i: len(sets[i]))
    for a_pos, i in enumerate(order):
        si = sets[i]
        for j in order[a_pos + 1:]:
            if len(si) < threshold * len(sets[j]):
                break
            if jaccard(si, sets[j]) >= threshold:
                truth_pairs += 1
                truth_dup[max(i, j)] = True
    verdicts = run_scan(binary, texts, ["--threshold", str(threshold), "--no-lang"])
    pred = [v["near_dup_of"] is not None for v in verdicts]
    tp = sum(1 for i in range(n) if pred[i] and truth_dup[i])
    fp = sum(1 for i in range(n) if pred[i] and not truth_dup[i])
    fn = sum(1 for i in range(n) if truth_dup[i] and not pred[i])
    pair_ok = sum(1 for v in verdicts if v["near_dup_of"] is not None
                  and jaccard(sets[v["doc"]], sets[v["near_dup_of"]]) >= threshold)
    return {"docs": n, "true_duplicate_docs": sum(truth_dup), "true_pairs_j_ge_threshold": truth_pairs,
            "predicted_duplicate_docs": sum(pred), "tp": tp, "fp": fp, "fn": fn,
            "precision": tp / max(1, tp + fp), "recall": tp / max(1, tp + fn),
            "kept_pair_precision": pair_ok / max(1, sum(pred)), "threshold": threshold}


def foreign_paragraphs(lang, rng, want):
    out = []
    for mo in sorted(glob.glob("/usr/share/locale/%s/LC_MESSAGES/*.mo" % lang)):
        try:
            cat = gettext.GNUTranslations(open(mo, "rb"))._catalog
        except Exception:
            continue
        sents = [v for v in cat.values() if isinstance(v, str) and 40 <= len(v) <= 300 and v.endswith(".")
                 and "%" not in v and "\n" not in v and not v.isupper()]
        rng.shuffle(sents)
        for k in range(0, len(sents) - 6, 6):
            out.append(" ".join(sents[k:k + 6]))
    rng.shuffle(out)
    return out[:want]


def english_paragraphs(rng, want):
    out = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        for para in re.split(r"\n\s*\n", open(p, encoding="utf-8", errors="replace").read()):
            para = " ".join(para.split())
            if len(para) >= 400 and para.endswith(".") and len(para.split()) >= 60:
                out.append(para)
    out = sorted(set(out))
    rng.shuffle(out)
    return out[:want]


def cut_mid_sentence(text, rng):
    for _ in range(50):
        pos = rng.randrange(len(text) // 3, len(text) * 9 // 10)
        cut = text.rfind(" ", 0, pos)
        head = text[:cut].rstrip()
        if head and head[-1].isalpha() and "." in head:
            return head
    return text[: len(text) // 2].rstrip(" .")


def noise_accuracy(binary, rng):
    en = english_paragraphs(rng, 300)
    fo = []
    for lang in ("de", "fr", "es"):
        fo += foreign_paragraphs(lang, rng, 100)
    fo_nonascii = [t for t in fo if any(ord(c) > 127 for c in t)]
    k = min(len(en) // 3, len(fo_nonascii) // 2, 100)
    docs, labels = [], []
    for t in en[:k]:
        docs.append(t); labels.append("clean")
    for t in fo[:k]:
        docs.append(t); labels.append("clean")
    for t in en[k:2 * k]:
        docs.append(cut_mid_sentence(t, rng)); labels.append("truncated")
    for a, b in zip(en[2 * k:3 * k], fo[k:2 * k]):
        docs.append(a + "\n\n" + b); labels.append("mixed_language")
    for t in fo_nonascii[:k]:
        docs.append(t.encode("utf-8").decode("latin-1")); labels.append("mojibake")
    verdicts = run_scan(binary, docs, ["--no-near-dup"])
    out = {"docs": len(docs), "per_class": k}
    for flag in ("truncated", "mixed_language", "mojibake"):
        tp = sum(1 for v, l in zip(verdicts, labels) if flag in v["flags"] and l == flag)
        fp = sum(1 for v, l in zip(verdicts, labels) if flag in v["flags"] and l != flag)
        pos = labels.count(flag)
        out[flag] = {"precision": tp / max(1, tp + fp), "recall": tp / max(1, pos), "tp": tp, "fp": fp,
                     "positives": pos}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/trainscope")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    res = {"argv": sys.argv,
           "near_dup": near_dup_accuracy(a.binary, a.threshold, random.Random(a.seed)),
           "noise": noise_accuracy(a.binary, random.Random(a.seed))}
    if a.out:
        json.dump(res, open(a.out, "w"), indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
