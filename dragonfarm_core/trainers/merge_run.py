"""Merge a succeeded run into a standalone model folder, and check it against base + adapters.

    python -m dragonfarm_core.trainers.merge_run RUN_DIR [--out DIR] [--job JOB_DIR]

`dragon.merge(run)` runs this as a background job (`--job`: <run>/jobs/merge-<time>/, where
`rundir.jobs.run_job` keeps its status; the app process never imports torch). The run is loaded
as its evaluation loads it (`evaluate_run.load_trained`: the base, the earlier adapters of its
chain folded in order, then its own adapter), greedy token ids are taken on a few held-out
prompts, the adapter is folded in too and the model saved with its tokenizer, chat template
and generation config (the reply's stop tokens included). The saved folder is then loaded back
with plain transformers (no peft) and must give the same prompt tokens, through its own
tokenizer and template, and the same greedy tokens; merge_check.json records the comparison
and a mismatch fails the merge, naming the first differing token. The folder is written beside
its destination and renamed into place once complete (`export.finish`).

A run trained on a 4-bit base is merged into the full-precision base (a merge into 4-bit
weights would round the adapter away); its check compares against that same base.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core.export import merge as export
from dragonfarm_core.rundir import files, jobs
from dragonfarm_core.rundir.train_config import TrainConfig, load_config

# How many held-out prompts the check decodes, and how far.
CHECK_PROMPTS = 4
CHECK_NEW_TOKENS = 16
# Tokenizer files a fast tokenizer's save_pretrained does not write but the base may ship:
# llama.cpp's converter reads a SentencePiece or BPE vocabulary from them.
SOURCE_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "merges.txt", "tokenizer.tiktoken")


def check_contexts(run_dir: Path, n: int = CHECK_PROMPTS) -> tuple[list[list[dict]], str]:
    """(up to `n` conversations to answer, the split they come from): held-out rows, else
    training rows; a messages row without its last reply, a pair's or GRPO row's prompt."""
    for split in ("eval", "train"):
        path = files.data_path(run_dir, split)
        contexts = []
        for row in files.read_jsonl(path) if path.is_file() else []:
            if not isinstance(row, dict):
                continue
            messages = row.get("messages")
            if isinstance(messages, list):
                while messages and messages[-1].get("role") == "assistant":
                    messages = messages[:-1]
            elif isinstance(row.get("prompt"), list):
                messages = row["prompt"]
            if messages:
                contexts.append(messages)
            if len(contexts) >= n:
                break
        if contexts:
            return contexts, split
    raise ValueError(
        f"{run_dir}/{files.DATA_DIR} holds no prompts to check the merge on; the run's data "
        "files are missing or empty."
    )


def greedy(model: Any, prompt: list[int], stop: list[int], pad_id: int | None) -> list[int]:
    """The model's greedy continuation of `prompt` (one row, so no padding), token ids."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=CHECK_NEW_TOKENS,
            do_sample=False,
            eos_token_id=stop,
            pad_token_id=pad_id,
        )
    return [int(t) for t in out[0, len(prompt) :]]


def copy_source_tokenizer_files(base: str, revision: str | None, out: Path) -> list[str]:
    """Copy the base's tokenizer files that the saved tokenizer lacks (from its folder, or
    from the Hub cache, never the network); returns their names."""
    from huggingface_hub import try_to_load_from_cache

    copied = []
    for name in SOURCE_TOKENIZER_FILES:
        if (out / name).exists():
            continue
        if Path(base).is_dir():
            found: Any = Path(base) / name
        else:
            found = try_to_load_from_cache(base, name, revision=revision)
        if isinstance(found, str | Path) and Path(found).is_file():
            shutil.copyfile(found, out / name)
            copied.append(name)
    return copied


def first_difference(expected: list[int], got: list[int]) -> int | None:
    """The first position where two token lists differ (a shorter one differs where it ends)."""
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return i
    return None if len(expected) == len(got) else min(len(expected), len(got))


def _token(tokenizer: Any, ids: list[int], at: int) -> dict[str, Any]:
    if at >= len(ids):
        return {"id": None, "text": "(ended)"}
    return {"id": ids[at], "text": tokenizer.decode([ids[at]])}


def compare(tokenizer: Any, cases: list[dict[str, Any]], what: str) -> dict[str, Any] | None:
    """The first case whose `what` ids differ between reference and merged, as a record."""
    for n, case in enumerate(cases):
        expected, got = case[f"expected_{what}"], case[f"merged_{what}"]
        at = first_difference(expected, got)
        if at is not None:
            return {
                "prompt": n,
                "in": what,
                "position": at,
                "expected": _token(tokenizer, expected, at),
                "merged": _token(tokenizer, got, at),
            }
    return None


def merge_run(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
    job_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Merge, save, reload and check; returns the check (also in <out>/merge_check.json)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dragonfarm_core.chat_template import DEFAULT_CHAT_TEMPLATE, stop_ids
    from dragonfarm_core.trainers.evaluate_run import load_trained
    from dragonfarm_core.trainers.evaluation import prompt_budget, prompt_ids

    run_dir = Path(run_dir).resolve()
    dest = Path(out_dir).resolve() if out_dir else export.default_out_dir(run_dir).resolve()
    export.check_replaceable(dest, run_dir)
    config: TrainConfig = load_config(run_dir)
    if config.hardware.load_in_4bit:  # merge into the full-precision base (see above)
        config = dataclasses.replace(
            config, hardware=dataclasses.replace(config.hardware, load_in_4bit=False)
        )
    model, tokenizer = load_trained(run_dir, config)  # the one loader: base, chain, adapter
    if not tokenizer.chat_template:  # as the worker serves it
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    dtype, device = next(model.parameters()).dtype, next(model.parameters()).device
    stop = stop_ids(model, tokenizer)
    contexts, split = check_contexts(run_dir)
    budget = prompt_budget(config.args.max_seq_len, CHECK_NEW_TOKENS)
    cases: list[dict[str, Any]] = []
    for context in contexts:
        prompt = prompt_ids(tokenizer, context, budget)
        reply = greedy(model, prompt, stop, tokenizer.pad_token_id)
        cases.append({"context": context, "expected_prompt": prompt, "expected_reply": reply})
    print(f"[dragonfarm] reference replies taken on {len(cases)} {split} prompts", flush=True)

    export.remove_leftovers(dest)  # what a killed merge into dest left behind
    tmp = export.temp_dir(dest, str(os.getpid()))
    try:
        merged = model.merge_and_unload()
        # A plain transformers generate stops where our replies stop (ChatML's end, too).
        merged.generation_config.eos_token_id = stop
        merged.generation_config.pad_token_id = tokenizer.pad_token_id
        merged.save_pretrained(tmp)  # safetensors: transformers' only format
        tokenizer.save_pretrained(tmp)
        copy_source_tokenizer_files(config.model.base, config.model.revision, tmp)
        print(f"[dragonfarm] merged model saved in {tmp}; checking it", flush=True)
        del model, merged
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()

        # The check: plain transformers, only the saved folder.
        plain_tok = AutoTokenizer.from_pretrained(tmp)
        plain = AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype).to(device).eval()
        saved_stop = plain.generation_config.eos_token_id
        saved_stop = saved_stop if isinstance(saved_stop, list) else [saved_stop]
        for case in cases:
            prompt = prompt_ids(plain_tok, case["context"], budget)
            case["merged_prompt"] = prompt
            case["merged_reply"] = greedy(plain, prompt, saved_stop, plain_tok.pad_token_id)
        difference = compare(plain_tok, cases, "prompt") or compare(plain_tok, cases, "reply")
        check = {
            "identical": difference is None,
            "prompts": len(cases),
            "split": split,
            "max_new_tokens": CHECK_NEW_TOKENS,
            "first_difference": difference,
            "base": config.model.base,
            "adapters": [*config.model.adapters, str(files.adapter_dir(run_dir))],
            "dtype": str(dtype).removeprefix("torch."),
            "device": str(device),
            "checked_at": files.now_iso(),
            "cases": [
                {"prompt": plain_tok.decode(c["merged_prompt"]), **{k: v for k, v in c.items()
                 if k != "context"}}
                for c in cases
            ],
        }  # fmt: skip
        if job_dir is not None:  # readable even when the merge fails
            files.write_json(Path(job_dir) / export.CHECK_FILE, check)
        if difference is not None:
            d = difference
            raise RuntimeError(
                f"The merged model differs from base + adapters on {split} prompt {d['prompt']} "
                f"({d['in']} token {d['position']}): expected {d['expected']['id']} "
                f"{d['expected']['text']!r}, got {d['merged']['id']} {d['merged']['text']!r}. "
                f"Nothing was written to {dest}."
            )
        files.write_json(tmp / export.CHECK_FILE, check)
        export.finish(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was renamed
    print(f"[dragonfarm] merged into {dest}: {len(cases)} prompts identical", flush=True)
    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.trainers.merge_run",
        description="Merge a succeeded run into a standalone model folder, checked.",
    )
    parser.add_argument("run_dir", help="the run directory (a folder with config.json)")
    parser.add_argument("--out", help="the model folder to write (default: RUN_DIR/merged)")
    parser.add_argument("--job", help="run as the job in this folder (status, heartbeat, cancel)")
    ns = parser.parse_args(argv)
    if not files.is_run_dir(ns.run_dir):
        parser.error(f"{ns.run_dir} is not a run directory: it has no {files.CONFIG}.")
    if ns.job:
        return jobs.run_job(ns.job, lambda: merge_run(ns.run_dir, ns.out, ns.job))
    merge_run(ns.run_dir, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
