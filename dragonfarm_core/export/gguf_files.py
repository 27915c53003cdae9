"""GGUF types, file names and check records: the types llama.cpp writes (`normalize_quant`),
how many first greedy tokens a quantized file must agree on (`agree_tokens`), where an export
goes by default, and the round-trip check record beside each file (<file>.check.json:
`read_check`, `describe_check`). `gguf` (the app side) and `trainers.gguf_run` (the job) share
them. Pure standard library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files

# Types llama.cpp's converter writes itself (--outtype) ...
DIRECT_QUANTS = ("f32", "f16", "bf16", "q8_0")
# ... and those llama-quantize makes from an f16 file (our name -> llama-quantize's).
QUANTIZE_TYPES = {
    name: name.upper()
    for name in ("q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l",
                 "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k", "iq4_nl", "iq4_xs")
}  # fmt: skip
QUANTS = (*DIRECT_QUANTS, *QUANTIZE_TYPES)
EXACT_QUANTS = frozenset({"f32", "f16", "bf16"})
# How many first greedy tokens a quantized file must agree on with transformers (the rest of
# the CHECK_NEW_TOKENS may part: rounding the weights moves near-tied logits). Measured on the
# bundled model, 6 prompts of 32 tokens: q8_0 agreed on every token of every prompt, q4_k_m on
# at least the first 6; the bars leave room for larger models' closer logits.
AGREE_TOKENS = {"q8_0": 16, "q6_k": 8, "q5_0": 4, "q5_1": 4, "q5_k_s": 4, "q5_k_m": 4,
                "q4_0": 2, "q4_1": 2, "q4_k_s": 2, "q4_k_m": 2, "iq4_nl": 2, "iq4_xs": 2}  # fmt: skip
AGREE_TOKENS_LOW = 1  # 3 bits and below: the first reply token
# A GGUF being written is named so beside its destination, then renamed.
TEMP_PREFIX = ".tmp-"
CHECK_SUFFIX = ".check.json"


class GGUFError(RuntimeError):
    """An export or a check was refused or failed; the message says why and what to do."""


def normalize_quant(quant: str) -> str:
    """`quant` as dragonfarm names it (lower case), or GGUFError listing the types."""
    name = str(quant).strip().lower()
    if name not in QUANTS:
        raise GGUFError(
            f"Unknown GGUF type {quant!r}. Use one of {', '.join(QUANTS)} (f16/bf16 keep the "
            "weights as trained; q8_0 is near-lossless at half the size; q4_k_m is the usual "
            "choice for a small file)."
        )
    return name


def agree_tokens(quant: str, n: int) -> int:
    """How many first greedy tokens of `n` the check requires identical for a `quant` file:
    all of them for an unquantized one."""
    if quant in EXACT_QUANTS:
        return n
    return min(n, AGREE_TOKENS.get(quant, AGREE_TOKENS_LOW))


def check_path(gguf: str | os.PathLike[str]) -> Path:
    """Where a GGUF's check record is: <file>.check.json."""
    path = Path(gguf)
    return path.with_name(path.name + CHECK_SUFFIX)


def read_check(gguf: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The check recorded for the GGUF (passed, first_difference, cases...), or None when there
    is none or it was made for an earlier file of that name (size or time differ)."""
    path = Path(gguf)
    record = files.read_record(check_path(path))
    if record is None or not path.is_file():
        return None
    info = path.stat()
    if record.get("size_bytes") != info.st_size or record.get("mtime_ns") != info.st_mtime_ns:
        return None
    return record


def describe_check(record: dict[str, Any]) -> str:
    """A check record as one line: the verdict and its figures (the CLI and the log print it)."""
    tolerance = record["tolerance"]
    rule = "all" if tolerance["exact"] else f"the first {tolerance['agree_tokens']}"
    line = (
        f"template round-trip {'passed' if record['passed'] else 'FAILED'} ({record['quant']}, "
        f"{record['prompts']} prompts): prompt tokens identical "
        f"{'yes' if record['templates_identical'] else 'no'}; greedy replies identical over "
        f"{record['max_new_tokens']} tokens {record['replies_identical']}/{record['prompts']}, "
        f"shortest agreement {record['min_agree_tokens']} (required: {rule})"
    )
    return line if record["passed"] else f"{line}. {difference_text(record)}"


def difference_text(record: dict[str, Any]) -> str:
    """The record's first difference in words: where, and the token on both sides."""
    d = record.get("first_difference")
    if not d:
        return "No difference."
    where = "prompt tokens (the chat template)" if d["in"] == "prompt" else "greedy reply"
    return (
        f"The GGUF differs from the merged model in the {where} of check prompt {d['prompt']}, "
        f"token {d['position']}: transformers {d['hf']['id']} {d['hf']['text']!r}, llama.cpp "
        f"{d['gguf']['id']} {d['gguf']['text']!r}."
    )


def default_out_file(merged_dir: str | os.PathLike[str], quant: str = "q8_0") -> Path:
    """Where a folder's GGUF goes unless told otherwise: beside it, <folder>-<quant>.gguf (a
    run's is <run>/merged-<quant>.gguf)."""
    path = Path(merged_dir).expanduser().resolve()
    return path.parent / f"{path.name}-{normalize_quant(quant)}.gguf"
