"""python bench/data_prep.py [--rows 100000] [--model PATH]

Data preparation speed: chat rows from a run's data/train.jsonl to token ids, as the SFT
trainer gets them (`sft_data.load`: check every row, render the chat template, tokenize, mask
the prompt, truncate at max_seq_len 512, write the Arrow cache), then the same load again on
unchanged data (what a rerun or a resume pays: the cache). The baseline, in the same process:
the plain way, one `apply_chat_template(tokenize=True)` per row (no masking, so it does less).
The rows are synthetic and deterministic: the example tickets' texts recombined into one to
three turns, a system prompt on some, about 317 tokens a row. `datasets` and the tokenizer
are imported and loaded before any timing (a trainer has them loaded anyway). The last line:
rows/s of a fresh load, that over the baseline, and the cached load's seconds.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dragonfarm_core.rundir import files  # noqa: E402

BUNDLED = ROOT / "assets" / "models" / "tiny-support"
TICKETS = ROOT / "assets" / "example_tickets.csv"
OUT = ROOT / "bench" / "out" / "data_prep"
MAX_LEN = 512


def chat_rows(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """`n` conversations built from the example tickets, the same for the same seed."""
    with open(TICKETS, encoding="utf-8", newline="") as f:
        tickets = list(csv.DictReader(f))
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        messages = []
        if rng.random() < 0.3:
            product = rng.choice(tickets)["product"]
            messages.append({"role": "system", "content": f"You answer {product} support mail."})
        for turn in range(rng.choice((1, 1, 2, 3))):
            t = rng.choice(tickets)
            question = f"{t['subject']}\n\n{t['body']}" if turn == 0 else t["body"]
            messages.append({"role": "user", "content": question})
            messages.append({"role": "assistant", "content": t["reply"]})
        rows.append(messages)
    return rows


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--model", type=Path, default=BUNDLED)
    parser.add_argument("--work", type=Path, default=OUT, help=argparse.SUPPRESS)
    opts = parser.parse_args()

    import datasets  # noqa: F401  (imported before timing, as in a trainer)
    from transformers import AutoTokenizer

    from dragonfarm_core.trainers import sft_data

    tokenizer = AutoTokenizer.from_pretrained(opts.model)
    rows = chat_rows(opts.rows)
    shutil.rmtree(opts.work, ignore_errors=True)
    files.write_jsonl(files.data_path(opts.work, "train"), [{"messages": m} for m in rows])
    load = [os.getloadavg()[0]]

    fresh, fresh_s = timed(lambda: sft_data.load(opts.work, tokenizer, MAX_LEN))
    cached, cached_s = timed(lambda: sft_data.load(opts.work, tokenizer, MAX_LEN))
    assert cached.train.input_ids == fresh.train.input_ids, "the cache gave other ids"
    assert cached.train.n_masked == fresh.train.n_masked, "the cache gave other masks"
    _, plain_s = timed(lambda: [tokenizer.apply_chat_template(m, tokenize=True) for m in rows])
    load.append(os.getloadavg()[0])

    tokens = sum(fresh.train.lengths)
    print(
        f"{opts.rows} rows, {tokens / opts.rows:.0f} tokens a row after truncation at {MAX_LEN} "
        f"({fresh.train.truncated_rows} truncated), {opts.model.name}'s tokenizer, "
        f"load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} cores"
    )
    print(f"fresh load: {fresh_s:.2f} s, {opts.rows / fresh_s:,.0f} rows/s")
    print(f"cached load (unchanged data): {cached_s:.3f} s")
    print(f"per-row apply_chat_template(tokenize=True): {plain_s:.2f} s, "
          f"{opts.rows / plain_s:,.0f} rows/s")  # fmt: skip
    print(
        f"rows_per_s={opts.rows / fresh_s:.0f} over_per_row={plain_s / fresh_s:.2f} "
        f"cached_rerun_s={cached_s:.3f}"
    )


if __name__ == "__main__":
    main()
