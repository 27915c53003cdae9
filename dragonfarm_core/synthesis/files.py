"""What synthesis writes and reads back: the JSONL of kept rows and its `.synthesis.json` record.

    path = output_path(None, runs_dir, "synthetic")   # <runs_dir>/synthetic/synthetic-<time>.jsonl
    ds = write(path, table, record, "synthetic", pairs=False, like=None)
    ds = open_synthesized(path)                        # the same mapped dataset, read back

What is kept is written atomically as JSONL (under `<runs_dir>/synthetic/` unless `file=`),
next to `<same name>.synthesis.json`: counts in, kept, dropped per reason with a few examples,
who answered and judged, and the settings. The data is written first, so a record never names
a file that is not there. The result is that file read back through the public data API, so
`code(run)` of a run trained on it points at the file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dragonfarm_core.data.dataset import Dataset, dataset
from dragonfarm_core.rundir import files, location
from dragonfarm_core.synthesis.asking import PromptRow

RECORD_SUFFIX = ".synthesis.json"
EXAMPLES_PER_REASON = 3  # dropped rows kept in the record per reason, to show what went
TAG = re.compile(r"[^A-Za-z0-9._-]+")  # what a name may not hold in a file name


class SynthesisError(ValueError):
    """Nothing survived: `synthesis` holds the record (what was dropped, and why)."""

    def __init__(self, message: str, synthesis: dict[str, Any]) -> None:
        super().__init__(message)
        self.synthesis = synthesis


@dataclass(frozen=True, eq=False, repr=False)
class SynthesizedDataset(Dataset):
    """A `Dataset` read from what synthesis wrote, with its record in `.synthesis`."""

    synthesis: dict[str, Any] | None = None

    def __repr__(self) -> str:
        text = super().__repr__()
        if not self.synthesis:
            return text
        s = self.synthesis
        dropped = ", ".join(f"{n} {k}" for k, n in s["dropped"].items() if n) or "none"
        return f"{text}\n  synthesis: {s['kept']} kept of {s['in']} prompts; dropped: {dropped}"


def record_of(
    kind: str, reasons: dict[str, str], rows: list[PromptRow], dropped: dict[int, str]
) -> dict[str, Any]:
    """The record's counts: rows in, kept, dropped per reason (every reason, 0 included) with
    a few examples of each; the caller adds who answered and the settings."""
    counts = dict.fromkeys(reasons, 0)
    examples: dict[str, list[dict[str, Any]]] = {}
    for i, reason in sorted(dropped.items()):
        counts[reason] += 1
        shown = examples.setdefault(reason, [])
        if len(shown) < EXAMPLES_PER_REASON:
            shown.append({"row": i, "prompt": rows[i].prompt[:500]})
    return {
        "kind": kind,
        "in": len(rows),
        "kept": len(rows) - len(dropped),
        "dropped": counts,
        "dropped_examples": examples,
        "reasons": reasons,
    }


def output_path(
    file: str | os.PathLike[str] | None, runs_dir: str | os.PathLike[str] | None, name: str
) -> Path:
    """`file` (a .jsonl path), else a new `<runs_dir>/synthetic/<name>-<time>.jsonl`."""
    if file is not None:
        path = Path(file).expanduser().resolve()
        if path.suffix.lower() != ".jsonl":
            raise ValueError(
                f"file = {str(file)!r}: synthesis writes JSONL; end the name in .jsonl."
            )
        return path
    tag = TAG.sub("-", name).strip("-.")
    folder = location.runs_dir(runs_dir) / files.SYNTHETIC_DIR
    stamp = files.now_iso().replace("-", "").replace(":", "").replace("T", "-")[:15]
    path, n = folder / f"{tag}-{stamp}.jsonl", 1
    while path.exists() or record_path(path).exists():  # two results in one second
        n += 1
        path = folder / f"{tag}-{stamp}-{n}.jsonl"
    return path


def record_path(path: str | os.PathLike[str]) -> Path:
    """The `.synthesis.json` record written next to a synthesized JSONL file."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(path.suffix) + RECORD_SUFFIX)


def write_result(
    path: Path,
    table: list[dict[str, Any]],
    record: dict[str, Any],
    name: str,
    pairs: bool,
    like: Dataset | None,
) -> SynthesizedDataset:
    """Write the kept rows and their record, and read them back as the mapped dataset (with
    the split `like` was asked for); SynthesisError, writing nothing, when none were kept."""
    if not table:
        shown = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in record["dropped"].items() if n)
        raise SynthesisError(
            f"Nothing was kept of {record['in']} prompts ({shown or 'no prompts'}); nothing "
            "was written. Loosen the quality settings (min_chars, max_chars, min_alpha_ratio, "
            "min_score, min_gap) or look at the replies (dragon.generate / the teacher itself).",
            record,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {**record, "file": str(path), "name": name, "created_at": files.now_iso()}
    # The data first: a record never names a file that is not there.
    files.write_jsonl(path, table)
    files.write_json(record_path(path), record)
    ds = _mapped(path, name, pairs, any(row.get("system") for row in table))
    if like is not None and like.split_set:  # the split asked for on the prompts carries over
        ds = ds.split(like.eval_frac, like.seed)
    return _with_record(ds, record)


def _mapped(path: Path, name: str, pairs: bool, system: bool) -> Dataset:
    ds = dataset(str(path), name=name)
    column = "system" if system else None
    if pairs:
        return ds.map_pairs(prompt="prompt", chosen="chosen", rejected="rejected", system=column)
    return ds.map(prompt="prompt", response="response", system=column)


def _with_record(ds: Dataset, record: dict[str, Any]) -> SynthesizedDataset:
    return SynthesizedDataset(
        **{f.name: getattr(ds, f.name) for f in fields(Dataset)}, synthesis=record
    )


def open_synthesized(path: str | os.PathLike[str]) -> SynthesizedDataset:
    """A synthesized JSONL file and its record, read back as the mapped dataset `synthesize`
    or `synthesize_pairs` returned."""
    path = Path(path).expanduser().resolve()
    record = files.read_record(record_path(path))
    if record is None or record.get("kind") not in ("synthesize", "synthesize_pairs"):
        raise FileNotFoundError(
            f"{record_path(path)} is missing, damaged or not a synthesis record; {path.name} was "
            "not written by dragon.synthesize() or dragon.synthesize_pairs()."
        )
    rows = files.read_jsonl(path)
    pairs = record["kind"] == "synthesize_pairs"
    ds = _mapped(path, record.get("name") or path.stem, pairs, any(r.get("system") for r in rows))
    return _with_record(ds, record)
