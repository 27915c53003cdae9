"""A run's tokenized rows, cached as Arrow: a rerun or resume on unchanged data loads its ids.

`encode_split` reads data/<split>.jsonl (checked as `sft_data.read_conversations` checks it,
with the same line-numbered errors), tokenizes it in batches through `datasets`' `map`, and
keeps the result in <run>/.cache/tokens/<split>-<key>.arrow (files.token_cache_dir). The key
is a hash of everything the ids depend on: the bytes of the data file, the tokenizer (its whole
JSON: vocabulary, merges, pre-tokenizer, added tokens), its class, special tokens and chat
template, max_len, the versions of tokenizers, transformers and jinja2, and the encoder's own
source (sft_data.py and this file). Changed data, settings or code tokenize again, so nothing
stale is read; `datasets`' own fingerprint of the map function is not relied on (it is given
the key instead, and never hashes the closure).

`datasets` writes the file under a temp name and renames it when complete, so a killed encode
leaves no half file under the key's name; only the newest file per split is kept.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import sft_data
from dragonfarm_core.trainers.sft_data import Encoded, TokenRows

BATCH_ROWS = 1000
# A temp file `datasets` left this long untouched was abandoned by a killed encode (a live
# one is written to after every batch).
STALE_TEMP_S = 3600.0


def cache_key(path: Path, tokenizer: Any, backend_json: str, max_len: int) -> str:
    """A hash of the data file's bytes and of everything else the encoded ids depend on."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(hashlib.file_digest(f, "sha256").digest())
    for part in (
        backend_json,
        type(tokenizer).__name__,
        repr(sorted(tokenizer.special_tokens_map.items())),
        tokenizer.chat_template or "",
        str(max_len),
        *(version(p) for p in ("tokenizers", "transformers", "jinja2")),
        *(Path(f).read_text(encoding="utf-8") for f in (sft_data.__file__, __file__)),
    ):
        digest.update(hashlib.sha256(part.encode()).digest())
    return digest.hexdigest()[:24]


def as_encoded(dataset: Any) -> Encoded:
    """The `input_ids`, `n_masked` and `truncated` columns: the ids stay in the Arrow file's
    memory (numpy views, `TokenRows`); 100k rows as Python lists would take seconds."""
    table = dataset.data
    ids = table.column("input_ids").combine_chunks()
    flat = ids.flatten().to_numpy()
    ends = np.cumsum(ids.value_lengths().to_numpy(), dtype=np.int64)
    n_masked = table.column("n_masked").to_numpy().tolist()
    truncated = int(table.column("truncated").to_numpy().sum())
    return Encoded(TokenRows(flat, ends), n_masked, truncated)


def _tokenized(
    conversations: list[list[dict[str, str]]], tokenizer: Any, backend: Any, max_len: int,
    target: Path, key: str,
) -> Any:  # fmt: skip
    """`datasets`' batched map from row numbers to token ids, written to `target`.

    The map reads the checked conversations by row number: an Arrow round trip of the
    messages would give a message the keys other rows' messages have (as null), which a chat
    template can see.
    """
    import datasets

    def encode_batch(batch: dict[str, list[int]]) -> dict[str, list[Any]]:
        rows = [conversations[i] for i in batch["row"]]
        return sft_data.tokenize(backend, *sft_data.render(tokenizer, rows), max_len)

    features = datasets.Features(
        {
            "input_ids": datasets.List(datasets.Value("int32")),
            "n_masked": datasets.Value("int32"),
            "truncated": datasets.Value("bool"),
        }
    )
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a progress bar per map would fill train.log
    try:
        rows = datasets.Dataset.from_dict({"row": list(range(len(conversations)))})
        return rows.map(
            encode_batch, batched=True, batch_size=BATCH_ROWS, remove_columns=["row"],
            features=features, cache_file_name=str(target), new_fingerprint=key,
            load_from_cache_file=False,
        )  # fmt: skip
    finally:
        if not quiet:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def _cycles_uncollected() -> Iterator[None]:
    """Python's cyclic garbage collector paused (as it was after).

    Reading and encoding allocate millions of containers (each row's messages, each row's
    ids), none in a cycle, and a collection scans every one still alive, again and again as
    they pile up. Paused, a fresh 100k-row load of bench/data_prep.py took 17.5-18.1 s
    against 18.6-19.2 s. Reference counting still frees everything as usual.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _prune(folder: Path, split: str, keep: Path) -> None:
    """Remove this split's older cache files, and temp files of killed encodes."""
    cutoff = time.time() - STALE_TEMP_S
    for path in folder.iterdir():
        older = path != keep and path.name.startswith(f"{split}-") and path.suffix == ".arrow"
        try:
            if older or (path.name.startswith("tmp") and path.stat().st_mtime < cutoff):
                path.unlink()
        except FileNotFoundError:  # another process pruned it first
            pass


def encode_split(
    run_dir: str | os.PathLike[str], split: str, tokenizer: Any, max_len: int
) -> Encoded:
    """data/<split>.jsonl as token ids (`sft_data.encode`'s), from the cache when unchanged."""
    path = files.data_path(run_dir, split)
    if not path.is_file():
        sft_data.read_rows(run_dir, split)  # the missing-file error, or no eval rows
        return Encoded([], [])
    backend, backend_json = sft_data.fast_backend(tokenizer)
    key = cache_key(path, tokenizer, backend_json, max_len)
    folder = files.token_cache_dir(run_dir)
    target = folder / f"{split}-{key}.arrow"
    if target.is_file():
        import datasets

        try:
            return as_encoded(datasets.Dataset.from_file(str(target)))
        except (OSError, ValueError):  # unreadable (a crash lost what the rename promised)
            target.unlink(missing_ok=True)
    with _cycles_uncollected():
        conversations = sft_data.read_conversations(run_dir, split)
        if not conversations:
            return Encoded([], [])
        folder.mkdir(parents=True, exist_ok=True)
        encoded = as_encoded(_tokenized(conversations, tokenizer, backend, max_len, target, key))
    _prune(folder, split, target)
    return encoded
