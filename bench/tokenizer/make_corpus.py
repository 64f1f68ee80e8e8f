#!/usr/bin/env python3
"""Writes the tokenizer benchmark corpus: ~10 MB of mixed English / code / CJK text.

Deterministic for a given Debian image: English prose from /usr/share/common-licenses and
/usr/share/doc (copyright files, READMEs), C/C++ code from /usr/include, and CJK (Chinese,
Japanese kana, Korean) sentences synthesized from Unicode ranges with a fixed-seed generator,
plus the multilingual test strings of shared/testdata/tokenizers/vectors/extra.inp. The
sources are cut into ~4 KB documents and interleaved 50% English / 35% code / 15% CJK+other
(by bytes); documents are separated by a line "\\x1e" (ASCII record separator) so both
benchmarks split the corpus into the same documents.

Usage: make_corpus.py OUT [--mb 10] [--shared ../shared]
"""
import argparse
import glob
import hashlib
import os
import random

DOC_BYTES = 4096
SEP = "\n\x1e\n"


def read_texts(paths, limit):
    out, total = [], 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                data = f.read()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "\x1e" in text or not text.strip():
            continue
        out.append(text)
        total += len(data)
        if total >= limit:
            break
    return out


def documents(texts):
    """Cuts texts into ~DOC_BYTES documents at line boundaries."""
    docs = []
    for t in texts:
        cur, size = [], 0
        for line in t.splitlines(keepends=True):
            cur.append(line)
            size += len(line.encode())
            if size >= DOC_BYTES:
                docs.append("".join(cur))
                cur, size = [], 0
        if cur:
            docs.append("".join(cur))
    return docs


def cjk_docs(rng, total, extra):
    hanzi = [chr(c) for c in range(0x4E00, 0x4E00 + 3500)]
    kana = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
    hangul = [chr(c) for c in range(0xAC00, 0xAC00 + 2000)]
    docs, size = [], 0
    while size < total:
        lines = []
        while sum(len(l.encode()) for l in lines) < DOC_BYTES:
            kind = rng.random()
            if kind < 0.45:  # Chinese: runs of ideographs with full-width punctuation
                s = "".join(rng.choice(hanzi) for _ in range(rng.randint(8, 30)))
                lines.append(s + rng.choice(["。", "，", "！", "？"]))
            elif kind < 0.75:  # Japanese: kanji mixed with kana
                s = "".join(rng.choice(hanzi if rng.random() < 0.3 else kana) for _ in range(rng.randint(10, 40)))
                lines.append(s + "。")
            elif kind < 0.95:  # Korean: syllable words separated by spaces
                words = ["".join(rng.choice(hangul) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(3, 10))]
                lines.append(" ".join(words) + ".")
            else:
                lines.append(rng.choice(extra))
        doc = "\n".join(lines) + "\n"
        docs.append(doc)
        size += len(doc.encode())
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../../shared"))
    args = ap.parse_args()
    total = int(args.mb * 1024 * 1024)
    rng = random.Random(20261130)

    english_paths = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(
        glob.glob("/usr/share/doc/*/copyright") + glob.glob("/usr/share/doc/*/README*"))
    code_paths = sorted(glob.glob("/usr/include/**/*.h", recursive=True)) + sorted(
        glob.glob("/usr/include/c++/**/*", recursive=True))
    english = documents(read_texts(english_paths, total * 0.5))
    code = documents(read_texts(code_paths, total * 0.35))
    extra_path = os.path.join(args.shared, "testdata/tokenizers/vectors/extra.inp")
    with open(extra_path, encoding="utf-8") as f:
        extra = [t for t in f.read().split("\n__ggml_vocab_test__\n") if t.strip() and "\x1e" not in t]
    cjk = cjk_docs(rng, total * 0.15, extra)

    # Interleave by byte quota so every part of the file is mixed.
    quotas = [(english, 0.50), (code, 0.35), (cjk, 0.15)]
    idx = [0, 0, 0]
    used = [0, 0, 0]
    out, size = [], 0
    while size < total:
        # Pick the source furthest below its share.
        k = min(range(3), key=lambda i: used[i] / quotas[i][1])
        docs = quotas[k][0]
        doc = docs[idx[k] % len(docs)]
        idx[k] += 1
        out.append(doc)
        n = len(doc.encode())
        used[k] += n
        size += n
    data = SEP.join(out).encode("utf-8")
    with open(args.out, "wb") as f:
        f.write(data)
    print(f"{args.out}: {len(data)} bytes, {len(out)} documents "
          f"(english {used[0]}, code {used[1]}, cjk+other {used[2]} bytes), "
          f"sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
