"""trainscope's tokenizer.json reader (src/tokenizer/hf_tokenizer.cc) against Hugging Face
`tokenizers` itself (issue 28).

Each case trains a tokenizer with the library on real text (the Debian license texts GPL-3
and Apache-2.0, plus a few lines in other scripts so that the vocabulary has pieces for
them), saves it with `Tokenizer.save`, and has `trainscope data pack --tokenizer FILE` encode
text the tokenizer never saw: other license texts (whole files and paragraphs), lines with
accents, Greek, Cyrillic, CJK, Hangul, Devanagari, Arabic, emoji (ZWJ sequences, skin tones,
flags), combining marks, ligatures, control and format characters, white-space runs and
special tokens inside the text. The ids in the packed .bin must equal the library's
`encode(text, add_special_tokens=False).ids` document by document. Cases (CASES): byte-level
BPE as GPT-2 (add_prefix_space false), with the library's default add_prefix_space true,
with Llama-3's Split regex, with an NFKC + Lowercase normalizer; WordPiece as BERT uncased
(lowercase, strip accents) and cased. The Greek capitals check lowercasing code point by
code point as the library does (ΟΔΟΣ -> οδοσ, not ICU's contextual final ς).

Which setting we match: `data pack` (and `data scan`, `train`) encode a document as the
library's `add_special_tokens=False`, then append the end-of-document id (`eos_id`:
<|endoftext|>, [SEP], ...). The post-processor is not run, so a BERT-style tokenizer's
`add_special_tokens=True` output has a [CLS] in front that ours does not; test_special_tokens
pins that difference. Special tokens written in the text itself are cut out and encoded as
their ids, as the library does (it matches them whatever add_special_tokens says).

Run with TS_BINARY=build/bin/trainscope and the project venv (which has `tokenizers`).
"""
import json
import os
import struct
import subprocess
import tempfile

import numpy as np
import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
    processors, trainers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _cli import BINARY  # noqa: E402
ENV = dict(os.environ, TRAINSCOPE_NO_PROGRESS="1")
LICENSES = "/usr/share/common-licenses"
TRAIN_FILES = ("GPL-3", "Apache-2.0")
HELD_OUT_FILES = ("MPL-2.0", "LGPL-2.1", "Artistic", "BSD", "CC0-1.0")

# Training text beside the licenses: other sentences in the scripts of HELD_OUT_LINES.
TRAIN_EXTRA = [
    "Le logiciel est fourni « tel quel », sans garantie d'aucune sorte. Les contributeurs "
    "déclinent toute responsabilité quant à son utilisation.",
    "Die Software wird ohne jede ausdrückliche oder stillschweigende Gewährleistung "
    "bereitgestellt. Größe, Straße, Übersetzung, Änderungen.",
    "El software se proporciona tal cual, sin garantía de ningún tipo. ¿Qué significa? ¡Señor!",
    "本软件按“原样”提供，不提供任何明示或暗示的保证。许可证的条款适用于本软件的所有副本。",
    "本ソフトウェアは「現状のまま」提供され、いかなる保証もありません。ライセンスの条件に従ってください。",
    "이 소프트웨어는 있는 그대로 제공되며 어떠한 보증도 하지 않습니다. 라이선스 조건을 따르십시오.",
    "Программное обеспечение предоставляется «как есть», без каких-либо гарантий. Лицензия.",
    "Το λογισμικό παρέχεται ΩΣ ΕΧΕΙ, χωρίς καμία ΕΓΓΥΗΣΗ. Οι όροι της άδειας ισχύουν πάντα.",
    "Emoji in commit messages: 🎉 release, 🐛 bug fix, ✨ feature, 👍🏽 approved, 👨‍👩‍👧 family.",
    "यह सॉफ़्टवेयर बिना किसी वारंटी के प्रदान किया जाता है। लाइसेंस की शर्तें लागू होती हैं।",
    "البرنامج مقدم كما هو دون أي ضمان. تنطبق شروط الترخيص.",
]

# Text the tokenizers never saw (none of these lines is in TRAIN_EXTRA).
HELD_OUT_LINES = [
    "Ce programme est distribué dans l'espoir qu'il sera utile, mais SANS AUCUNE GARANTIE ; "
    "naïve façade, coöpérer, élève, Œuvre, ÇA.",
    "Sie sollten eine Kopie der GNU General Public License zusammen mit diesem Programm "
    "erhalten haben. Äpfel, Öl, Übel, groß, STRASSE.",
    "本程序是自由软件：你可以再分发之和/或依照由自由软件基金会发布的 GNU 通用公共许可证修改之。",
    "このプログラムはフリーソフトウェアです。あなたはこれを再頒布または改変することができます。",
    "저작권 고지와 이 허가 고지를 모든 복사본에 포함해야 합니다.",
    "Эта программа распространяется в надежде, что она будет полезной, но БЕЗ ВСЯКИХ ГАРАНТИЙ.",
    "ΟΔΟΣ ΣΟΦΟΣ. Ο Σωκράτης και ο ΟΔΥΣΣΕΥΣ ΕΙΝΑΙ ΕΔΩ; ΣΑΣ ΑΣΣΟΣ.",
    "Release notes 🚀: fixed 🐛 x3, 👩🏾‍💻 wrote docs, 🇩🇪🇯🇵 flags, ❤️ thanks! 🙏🏻",
    "Math: ∑ᵢ xᵢ² ≤ ∞, ½ + ¼ = ¾, ①②③, ５６７ (fullwidth), Ⅻ, 3.14159, 10⁻⁶.",
    "Combining: e\u0301 vs é, A\u030a vs Å, n\u0303; ﬁnal ligature; İstanbul; ǅ titlecase; ẞ.",
    "यह प्रोग्राम इस आशा में वितरित किया जाता है कि यह उपयोगी होगा।",
    "هذا البرنامج حر؛ يمكنك إعادة توزيعه و/أو تعديله.",
    "It's the licensee's right; we'll see, they'd've gone, I'M SURE, don't 'quote' me, O'Neil's.",
    "Version 2.0, January 2004 — section 3(b)(ii) … 1234567 12,345.67 0x1F $100 #42 @user",
    "bell\x07 tab\tvt\x0b ff\x0c nel\x85 ls\u2028 ps\u2029 zwsp\u200b shy\u00ad bom\ufeff "
    "nbsp\u00a0x ideo\u3000x thin\u2009x zwj\u200dx",
    # white-space runs
    "two  spaces, three   spaces, tabs\t\tand\t \tmixed",
    "   leading spaces",
    "trailing spaces   ",
    "\n\n\nleading newlines",
    "windows\r\nline\r\n\r\nends",
    "     ",
    "\t",
    "a\n \n b\n\n\n\nc",
    "indented\n    code block\n\tand tab\n",
    "x" * 150 + " " + "ab" * 80,  # a word past WordPiece's max_input_chars_per_word
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
]


def held_out_docs():
    """Documents from licenses outside the training set: each whole file, then its
    paragraphs, then HELD_OUT_LINES."""
    docs = []
    for name in HELD_OUT_FILES:
        with open(os.path.join(LICENSES, name), encoding="utf-8") as fh:
            text = fh.read()
        docs.append(text)
        docs.extend(p for p in text.split("\n\n") if p.strip())
    docs.extend(HELD_OUT_LINES)
    return docs


def training_text():
    texts = []
    for name in TRAIN_FILES:
        with open(os.path.join(LICENSES, name), encoding="utf-8") as fh:
            texts.append(fh.read())
    return texts + TRAIN_EXTRA


# --- tokenizers as the library builds them -----------------------------------------------

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level_bpe(add_prefix_space=False, split=None, normalizer=None):
    """GPT-2's recipe (ByteLevel pre-tokenizer, decoder and post-processor); with `split`,
    Llama-3's: a Split regex, then ByteLevel without its own regex."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    if split is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    return tok


def bert_wordpiece(lowercase=True):
    """BERT's recipe: BertNormalizer (uncased: lowercase and strip accents; cased: neither),
    BertPreTokenizer, WordPiece with ## continuations, [CLS] $A [SEP] post-processor."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=3000, show_progress=False,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                        "[MASK]"])
    tok.train_from_iterator(training_text(), trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


CASES = {
    # name: (builder, end-of-document token, a special token to write inside the text)
    "bpe_gpt2": (lambda: byte_level_bpe(add_prefix_space=False), "<|endoftext|>", "<|pad|>"),
    "bpe_prefix_space": (lambda: byte_level_bpe(add_prefix_space=True), "<|endoftext|>",
                         "<|pad|>"),
    "bpe_llama3_split": (lambda: byte_level_bpe(split=LLAMA3_SPLIT), "<|endoftext|>", "<|pad|>"),
    "bpe_nfkc_lowercase": (lambda: byte_level_bpe(normalizer=normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Lowercase()])), "<|endoftext|>", "<|pad|>"),
    "wordpiece_uncased": (lambda: bert_wordpiece(lowercase=True), "[SEP]", "[MASK]"),
    "wordpiece_cased": (lambda: bert_wordpiece(lowercase=False), "[SEP]", "[MASK]"),
}


def special_token_docs(special):
    return [f"before{special}after", f"a {special} b", f"{special}", f"{special}{special}x",
            f"  {special}\n", f"émoji 🎉{special}日本"]


# --- trainscope's side ---------------------------------------------------------------------

def read_megatron(prefix):
    """The token stream of a `data pack` dataset (docs/formats.md): dtype from the .idx."""
    with open(prefix + ".idx", "rb") as fh:
        head = fh.read(9 + 8 + 1 + 8 + 8)
    assert head[:9] == b"MMIDIDX\x00\x00", head[:9]
    version, code, n_seq, n_doc = struct.unpack("<QBQQ", head[9:])
    assert version == 1 and n_doc == n_seq + 1, (version, n_seq, n_doc)
    dtype = {8: np.uint16, 4: np.int32}[code]
    return np.fromfile(prefix + ".bin", dtype=dtype).astype(np.int64), n_seq


def pack_ids(tokenizer_json, docs, work):
    """trainscope's ids of each document: `data pack --mode concat` of a JSONL file, the
    stream cut after each end-of-document id."""
    corpus = os.path.join(work, "docs.jsonl")
    with open(corpus, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    prefix = os.path.join(work, "packed")
    seq_len = 1024
    p = subprocess.run([BINARY, "data", "pack", corpus, "-o", prefix, "--seq-len", str(seq_len),
                        "--mode", "concat", "--tokenizer", tokenizer_json, "--json"],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["docs"] == len(docs), rep
    stream, n_seq = read_megatron(prefix)
    assert len(stream) == n_seq * seq_len == rep["sequences"] * seq_len, (len(stream), rep)
    return rep, stream[:rep["tokens"]]


def split_docs(stream, eos, n):
    docs, start = [], 0
    for i in np.flatnonzero(stream == eos):
        docs.append(stream[start:i].tolist())
        start = i + 1
    assert start == len(stream), "the stream does not end with the end-of-document id"
    assert len(docs) == n, (len(docs), n)
    return docs


def first_difference(ours, theirs):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return min(len(ours), len(theirs))


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    build, eos_token, special = CASES[request.param]
    with tempfile.TemporaryDirectory(prefix="ts-tok-") as work:
        tok = build()
        path = os.path.join(work, "tokenizer.json")
        tok.save(path)
        yield request.param, Tokenizer.from_file(path), path, eos_token, special, work


def test_ids_equal_library(case):
    name, tok, path, eos_token, special, work = case
    docs = held_out_docs() + special_token_docs(special)
    assert not any(eos_token in d for d in docs)
    eos = tok.token_to_id(eos_token)
    rep, stream = pack_ids(path, docs, work)
    assert rep["tokenizer"].startswith("hf-bpe:" if name.startswith("bpe") else "hf-wordpiece:")
    assert rep["vocab_size"] == tok.get_vocab_size(with_added_tokens=True), rep
    ours = split_docs(stream, eos, len(docs))
    theirs = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    assert sum(map(len, theirs)) > 20000  # real text, not a handful of tokens
    bad = [i for i in range(len(docs)) if ours[i] != theirs[i]]
    if bad:
        i = bad[0]
        k = first_difference(ours[i], theirs[i])
        # the context of the first difference, in the library's own tokens
        word = tok.encode(docs[i], add_special_tokens=False).tokens[max(0, k - 3):k + 4]
        pytest.fail(f"{name}: {len(bad)} of {len(docs)} documents differ; first: doc {i} "
                    f"{docs[i][:120]!r} at token {k}: ours {ours[i][max(0, k - 3):k + 4]} "
                    f"theirs {theirs[i][max(0, k - 3):k + 4]} ({word}); also docs {bad[1:10]}")


def test_special_tokens(case):
    """The settings we match: add_special_tokens=False, plus the end-of-document id. For the
    BERT recipe the library's add_special_tokens=True adds [CLS] in front and [SEP] after;
    the ByteLevel post-processor adds nothing."""
    name, tok, path, eos_token, special, work = case
    docs = ["The licensee [shall] keep this notice.", f"x{special}y", "Größe 🎉 本"]
    eos = tok.token_to_id(eos_token)
    _, stream = pack_ids(path, docs, work)
    per_doc = []
    start = 0
    for i in np.flatnonzero(stream == eos):
        per_doc.append(stream[start:i + 1].tolist())  # with its end-of-document id
        start = i + 1
    assert len(per_doc) == len(docs)
    for doc, packed in zip(docs, per_doc):
        plain = tok.encode(doc, add_special_tokens=False).ids
        with_special = tok.encode(doc, add_special_tokens=True).ids
        assert packed == plain + [eos], (doc, packed, plain)
        if name.startswith("wordpiece"):
            assert with_special == [tok.token_to_id("[CLS]")] + plain + [eos], with_special
        else:
            assert with_special == plain, with_special
        assert tok.token_to_id(special) in plain or special not in doc
