#!/usr/bin/python3
"""Builds a large, realistic JSONL corpus for `trainscope data scan` benchmarks.

Text comes from the machine itself: Debian's licence texts and the copyright, README,
NEWS and changelog files under /usr/share/doc (plain or .gz). Fresh documents are mixes of
6-14 random paragraphs from different sources, so they are not near-duplicates of each other;
on top of them the generator plants exact copies (--exact, default 5%) and near-duplicates
(--near, default 5%: an earlier document with 2% of its words replaced). The source licence
texts themselves add natural near-duplicates, as real crawls do.

Usage: make_corpus.py --out corpus.jsonl --mb 512 [--seed 1]
Prints a JSON summary (docs, bytes, planted counts) on stdout.
"""
import argparse, glob, gzip, json, os, random, re, sys


def sources():
    paths = sorted(glob.glob("/usr/share/common-licenses/*"))
    for pat in ("copyright", "README*", "NEWS*", "changelog*", "*.txt"):
        paths += sorted(glob.glob("/usr/share/doc/*/" + pat))
    seen = set()
    for p in paths:
        if p in seen or not os.path.isfile(p):
            continue
        seen.add(p)
        try:
            raw = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
            yield raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue


def paragraphs():
    out = []
    for text in sources():
        for para in re.split(r"\n\s*\n", text):
            para = para.strip()
            if 80 <= len(para) <= 4000:
                out.append(para)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--exact", type=float, default=0.05)
    ap.add_argument("--near", type=float, default=0.05)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    paras = paragraphs()
    if not paras:
        sys.exit("no source text found under /usr/share/doc")
    target = int(a.mb * 1e6)
    written = docs = exact = near = 0
    kept = []  # reservoir of earlier documents to copy from
    with open(a.out, "w", encoding="utf-8") as f:
        while written < target:
            r = rng.random()
            if kept and r < a.exact:
                text = rng.choice(kept)
                exact += 1
            elif kept and r < a.exact + a.near:
                words = rng.choice(kept).split(" ")
                for _ in range(max(1, len(words) // 50)):
                    words[rng.randrange(len(words))] = rng.choice(("data", "model", "text", "file"))
                text = " ".join(words)
                near += 1
            else:
                text = "\n\n".join(rng.choice(paras) for _ in range(rng.randint(6, 14)))
            if len(kept) < 20000:
                kept.append(text)
            elif rng.random() < 0.01:
                kept[rng.randrange(len(kept))] = text
            line = json.dumps({"id": "doc%d" % docs, "text": text, "source": "usr-share-doc"},
                              ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))
            docs += 1
    json.dump({"path": a.out, "docs": docs, "bytes": written, "planted_exact": exact,
               "planted_near": near, "source_paragraphs": len(paras)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
