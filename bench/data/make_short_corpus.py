#!/usr/bin/python3
"""Builds a corpus of short real-text documents (~700 bytes) for `trainscope data scan`.

Unlike make_corpus.py (long mixes of paragraphs), each document here is one contiguous
~700-byte run of real text cut at a line end, as web crawls of short pages look: Debian's
licence texts, every /usr/share/doc/*/copyright, changelog and README (plain or .gz), and
the man pages under /usr/share/man (zcat'ed roff source). When the sources run out before
--mb, they are read again with a different cut offset, so the second pass is not a byte
copy of the first (only the licence texts repeat, as real crawls repeat them).

Usage: make_short_corpus.py --out short.jsonl --mb 128 [--doc-bytes 700]
Prints a JSON summary (docs, bytes, sources) on stdout. Not committed: generated at bench time.
"""
import argparse, glob, gzip, json, os, sys


def source_paths():
    paths = sorted(glob.glob("/usr/share/common-licenses/*"))
    for pat in ("copyright", "README*", "NEWS*", "changelog*", "*.txt"):
        paths += sorted(glob.glob("/usr/share/doc/*/" + pat))
    paths += sorted(glob.glob("/usr/share/man/man*/*.gz"))
    seen = set()
    for p in paths:
        if p not in seen and os.path.isfile(p):
            seen.add(p)
            yield p


def read_text(path):
    try:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def documents(text, doc_bytes, skip):
    """Cuts `text` into runs of about doc_bytes characters, each ending at a line end."""
    lines = text.splitlines(keepends=True)[skip:]
    cur, size = [], 0
    for line in lines:
        cur.append(line)
        size += len(line)
        if size >= doc_bytes:
            yield "".join(cur).strip()
            cur, size = [], 0
    if size >= doc_bytes // 4:
        yield "".join(cur).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=128)
    ap.add_argument("--doc-bytes", type=int, default=700)
    a = ap.parse_args()
    limit = int(a.mb * 1e6)
    written = docs = files = 0
    paths = list(source_paths())
    with open(a.out, "w", encoding="utf-8") as out:
        for rnd in range(64):
            for p in paths:
                text = read_text(p)
                if text is None:
                    continue
                files += 1
                for doc in documents(text, a.doc_bytes, skip=rnd * 3):
                    if not doc:
                        continue
                    line = json.dumps({"text": doc}, ensure_ascii=False) + "\n"
                    out.write(line)
                    written += len(line.encode("utf-8"))
                    docs += 1
                    if written >= limit:
                        json.dump({"docs": docs, "bytes": written, "source_files": files,
                                   "passes": rnd + 1}, sys.stdout)
                        print()
                        return
    sys.exit("sources exhausted before --mb")


if __name__ == "__main__":
    main()
