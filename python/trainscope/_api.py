"""The CLI's analyses as Python functions: thin wrappers over trainscope._core.

Each returns the same dict as the matching `trainscope ... --json` (the CLI and these call
the same library function) and raises `trainscope.Error` (trainscope._core.Error, a
RuntimeError) with the CLI's one-line message when an input is missing or unreadable.
Paths may be str or os.PathLike, one or a list. The calls release the GIL and print nothing.
"""
import os

from . import _core


def _paths(paths):
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fsdecode(paths)]
    return [os.fsdecode(p) for p in paths]


def trace_analyze(paths, *, gap_threshold_pct=20.0, top=10, strict=False,
                  include_last_step=False, ns_precision=False):
    """Profiler traces -> dict of `trainscope trace analyze --json`.

    paths: PyTorch/Kineto Chrome traces (.json, .json.gz), torch_npu output folders or
    trainscope phase logs (.jsonl); one file or folder per rank. Options mirror the CLI:
    gap_threshold_pct (flag steps whose iteration gap exceeds it), top (rows of the operator
    tables), strict (bad records are an Error), include_last_step, ns_precision.
    """
    return _core.trace_analyze(_paths(paths), gap_threshold_pct=gap_threshold_pct, top=top,
                               strict=strict, include_last_step=include_last_step,
                               ns_precision=ns_precision)


def data_scan(paths, **opts):
    """Corpus files, folders or globs -> dict of `trainscope data scan --json`.

    Keyword options are the CLI's flags with '_' for '-': format ('auto', 'jsonl', 'text',
    'megatron'), text_field, id_field, blocks, max_doc_bytes, seq_len, batch_size,
    threshold, verdicts (a JSONL path to write), threads, ngram, bands, rows, seed,
    shuffle_seed, c4_min_sentences, tmp_dir, near_dup, language, noise, exact_only,
    fail_on ('duplicates=0.05,noise=0.2' or 'none'), tokenizer (a SentencePiece .model or a
    HuggingFace tokenizer.json; default byte-level). mmap=True reads uncompressed JSONL
    through a memory mapping (faster; a file truncated meanwhile kills the process).
    """
    return _core.data_scan(_paths(paths), **opts)


def diagnose(paths, *, rules=""):
    """Run directories, folders of logs or metrics files -> dict of `trainscope diagnose --json`.

    rules: a rule file to use instead of the bundled one.
    """
    return _core.diagnose(_paths(paths), rules=os.fsdecode(rules))


def env_fingerprint(*, timeout_ms=2000):
    """This machine -> dict of `trainscope env fingerprint --json` (timeout_ms per probe)."""
    return _core.env_fingerprint(timeout_ms=timeout_ms)


def hang_analyze(paths, *, mismatch_cap=10):
    """Flight recorder dumps (run dirs, folders or files) -> dict of `trainscope hang analyze --json`.

    Raises Error when no dump could be read. mismatch_cap: findings reported at most.
    """
    return _core.hang_analyze(_paths(paths), mismatch_cap=mismatch_cap)


def ckpt_inspect(paths):
    """Checkpoints or folders of them -> dict of `trainscope ckpt inspect --json`."""
    return _core.ckpt_inspect(_paths(paths))


def ckpt_verify(paths):
    """Checkpoints or folders of them -> dict of `trainscope ckpt verify --json` ('ok' key)."""
    return _core.ckpt_verify(_paths(paths))


def ckpt_diff(a, b):
    """Two checkpoints -> dict of `trainscope ckpt diff --json`."""
    return _core.ckpt_diff(os.fsdecode(a), os.fsdecode(b))
