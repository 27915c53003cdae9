"""`Dataset.report()`: what a person should know about their data before training on it.

Row count, empty or missing cells per mapped field, exact duplicates and near-duplicate
prompts (report_texts.py says what is compared), length in characters and tokens (min /
median / p95 / max), and how many rows will be cut at `max_seq_len`. Tokens are counted with the `tokenizers` library from a model folder or a
tokenizer.json (never transformers, which the app must not import); without a tokenizer they
are estimated as characters / 4 and the report says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.neardup import THRESHOLD, near_duplicates
from dragonfarm_core.data.report_texts import report_texts

if TYPE_CHECKING:
    from dragonfarm_core.data.dataset import Dataset

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers
# Near duplicates are looked for among this many rows (the first); exact ones among all.
# Bounds the report's time and memory on a dataset of a million rows (docs/BENCHMARKS.md).
MAX_NEAR_ROWS = 100_000
STAT_NAMES = ("min", "median", "p95", "max")
# Texts tokenized at once: each encoding holds its ids, pieces and offsets (about 80 bytes a
# token), which for a million rows at once came to most of the Mapping tab's peak memory.
TOKEN_BATCH = 10_000


@dataclass(frozen=True)
class DataReport:
    """Facts about a dataset's rows; `to_markdown()` for people, `to_dict()` for programs."""

    name: str
    kind: str | None  # the mapping kind, None when the dataset is not mapped yet
    n_rows: int  # rows read
    n_usable: int  # rows that become training records
    empty: dict[str, int]  # mapped field (or column, when unmapped) -> rows empty or missing
    identical_pairs: int  # preference rows whose chosen and rejected replies are the same
    exact_duplicates: int  # usable rows identical to an earlier one
    near_duplicates: int  # usable rows whose prompt nearly repeats an earlier row's prompt
    near_duplicate_rows: list[tuple[int, int, float]]  # (earlier row, row, score %), from 1
    near_threshold: float
    chars: dict[str, float] | None  # min, median, p95, max characters per usable row
    tokens: dict[str, float] | None  # the same in tokens
    tokens_estimated: bool  # True when tokens are characters / 4
    tokenizer: str | None  # where the tokenizer came from
    max_seq_len: int
    truncated_rows: int  # usable rows longer than max_seq_len tokens
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples become lists."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def to_markdown(self) -> str:
        """A small table, then the notes as a list."""
        tok = "estimated as characters / 4" if self.tokens_estimated else _tokenizer_name(self)
        empty = ", ".join(f"{k}: {v}" for k, v in self.empty.items()) or "none"
        rows = [
            ("rows", f"{self.n_rows} ({self.n_usable} usable)"),
            ("empty or missing cells", empty),
            ("exact duplicates", str(self.exact_duplicates)),
            (f"near-duplicate prompts (>= {self.near_threshold:g}% similar)", _near(self)),
            ("length in characters", _stats(self.chars)),
            (f"length in tokens ({tok})", _stats(self.tokens)),
            (f"rows over {self.max_seq_len} tokens (truncated)", str(self.truncated_rows)),
        ]
        if self.kind == "pairs":
            rows.insert(2, ("chosen = rejected", str(self.identical_pairs)))
        # A real header row: an empty one renders as a blank bar above the table.
        lines = [f"### Data report: {self.name}", "", "| measure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in rows]
        return "\n".join(lines + [""] + [f"- {n}" for n in self.notes]).rstrip()

    def __repr__(self) -> str:
        tok = "tokens (estimated)" if self.tokens_estimated else "tokens"
        empty = ", ".join(f"{k} {v}" for k, v in self.empty.items() if v) or "none"
        return (
            f"DataReport {self.name!r}: {self.n_rows} rows, {self.n_usable} usable\n"
            f"  empty cells: {empty}\n"
            f"  duplicates: {self.exact_duplicates} exact, {self.near_duplicates} near\n"
            f"  {tok}: {_stats(self.tokens)}\n"
            f"  over {self.max_seq_len} tokens: {self.truncated_rows}"
        )


def _tokenizer_name(report: DataReport) -> str:
    """How the table names the tokenizer: the model folder it came from, not its full path
    (an internal path as a row label says nothing); `to_dict()` keeps the path."""
    where = report.tokenizer or ""
    path = Path(where)
    if path.name != "tokenizer.json":
        return f"counted with {where}" if where else "counted"
    return f"counted with the tokenizer of {path.parent.name or 'the model'}"


def _stats(values: dict[str, float] | None) -> str:
    if not values:
        return "n/a"
    return " / ".join(f"{k} {values[k]:g}" for k in STAT_NAMES)


def _near(report: DataReport) -> str:
    shown = ", ".join(f"rows {a} & {b}" for a, b, _ in report.near_duplicate_rows[:3])
    return f"{report.near_duplicates}" + (f" (e.g. {shown})" if shown else "")


def describe(values: list[int]) -> dict[str, float] | None:
    """min / median / p95 / max of a list of lengths (None when empty)."""
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    out = (arr.min(), np.median(arr), np.percentile(arr, 95), arr.max())
    return {k: round(float(v), 1) for k, v in zip(STAT_NAMES, out, strict=True)}


def load_tokenizer(tokenizer: Any) -> tuple[Any, str]:
    """A `tokenizers.Tokenizer` from a model folder, a tokenizer.json path, or an instance."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        # A copy, so that switching off truncation below does not change the caller's object.
        return Tokenizer.from_str(tokenizer.to_str()), "the given tokenizer"
    path = Path(tokenizer).expanduser()
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise DatasetError(
            f"{file}: no tokenizer.json there. Pass a model folder that contains tokenizer.json, "
            f"or the tokenizer.json file itself (or tokenizer=None to estimate tokens)."
        )
    try:
        return Tokenizer.from_file(str(file)), str(file)
    except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
        raise DatasetError(f"{file} is not a readable tokenizer.json ({exc}).") from None


def count_tokens(texts: list[str], tokenizer: Any) -> list[int]:
    """Token counts, without the tokenizer's own truncation or padding getting in the way.
    TOKEN_BATCH texts are encoded at a time, and only their counts kept."""
    tokenizer.no_truncation()
    tokenizer.no_padding()
    counts: list[int] = []
    for start in range(0, len(texts), TOKEN_BATCH):
        batch = texts[start : start + TOKEN_BATCH]
        counts += [len(e.ids) for e in tokenizer.encode_batch_fast(batch, add_special_tokens=True)]
    return counts


def row_tokens(
    lengths: list[list[str]], chars: list[int], tokenizer: Any
) -> tuple[list[int], str | None]:
    """Tokens per row (the longest of its texts) and the tokenizer's origin; None = estimate."""
    if tokenizer is None:
        return [math.ceil(c / CHARS_PER_TOKEN) for c in chars], None
    tok, where = load_tokenizer(tokenizer)
    counts = iter(count_tokens([t for group in lengths for t in group], tok))
    return [max(next(counts) for _ in group) for group in lengths], where


def build_report(ds: Dataset, tokenizer: Any = None, max_seq_len: int = 1024) -> DataReport:
    """Everything in `DataReport`, for a mapped or a not yet mapped dataset."""
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise DatasetError(f"max_seq_len must be a whole number >= 1, got {max_seq_len!r}.")
    texts = report_texts(ds)
    notes = list(texts.notes)
    exact = len(texts.keys) - len(set(texts.keys))
    near = near_duplicates(texts.similar[:MAX_NEAR_ROWS])
    if len(texts.similar) > MAX_NEAR_ROWS:
        notes.append(
            f"Near duplicates were looked for among the first {MAX_NEAR_ROWS:,} rows of "
            f"{len(texts.similar):,}; exact duplicates among all of them."
        )
    near_rows = [(texts.rows[a] + 1, texts.rows[b] + 1, s) for a, b, s in near]
    chars = [max(len(t) for t in group) for group in texts.lengths]
    tokens, where = row_tokens(texts.lengths, chars, tokenizer)
    if where is None:
        notes.append(
            "Token counts are estimated as characters / 4; pass tokenizer= (a model "
            "folder or tokenizer.json) for exact counts."
        )
    else:
        notes.append(
            "Token counts cover the message text; the chat template adds a few tokens per turn."
        )
    truncated = sum(1 for t in tokens if t > max_seq_len)
    if exact:
        notes.append(
            f"{exact} rows repeat an earlier row exactly; they add weight, not information."
        )
    if truncated:
        notes.append(
            f"{truncated} rows exceed max_seq_len={max_seq_len} and will be cut; raise "
            f"max_seq_len or shorten them."
        )
    return DataReport(
        name=ds.name,
        kind=ds.mapping.kind if ds.mapping else None,
        n_rows=len(ds),
        n_usable=len(texts.keys),
        empty=texts.empty,
        identical_pairs=texts.identical,
        exact_duplicates=exact,
        near_duplicates=len(near),
        near_duplicate_rows=near_rows[:20],
        near_threshold=THRESHOLD,
        chars=describe(chars),
        tokens=describe(tokens),
        tokens_estimated=where is None,
        tokenizer=where,
        max_seq_len=max_seq_len,
        truncated_rows=truncated,
        notes=notes,
    )
