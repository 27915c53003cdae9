"""Synthesis: training data from a teacher, and preference pairs from a model's own samples.

    teacher = dragon.llm_anthropic(system=persona)
    synth = dragon.synthesize(tickets, teacher, system=persona)  # a Dataset mapped for SFT
    synth.synthesis["dropped"]                                   # {"too_short": 2, ...}
    pairs = dragon.synthesize_pairs(dragon.prompts(sft, "train"), student=sft,
                                    judge=dragon.judge_anthropic())
    dpo = dragon.prefer(pairs, sft)

`synthesize` asks the teacher once per prompt, then a quality pass (`synthesis_quality`) drops
replies that failed (a refusal, an empty answer, an error), are too short or too long, look
garbled, or repeat or nearly repeat an earlier reply (`data.neardup.repeats`, the data report's
MinHash/rapidfuzz code); prompts that repeat an earlier prompt are dropped before anyone is
asked. With a judge, only replies scoring at least `min_score` stay (scored by
`judging.score_replies`, the one scorer). `synthesize_pairs` (`synthesis_pairs`, exported
here too) samples the student `n_samples` times per prompt in one batched call and keeps the
judge's best against its worst when they are `min_gap` apart, or takes a teacher's reply as
chosen and the student's as rejected.

What is kept is written (`synthesis_files`) atomically as JSONL (under `<runs_dir>/synthetic/` unless `file=`),
next to `<same name>.synthesis.json`, the record of what happened: counts in, kept, dropped
per reason, who answered and judged (descriptions without keys) and the settings. The result is
that file read back through the public data API, so `code(run)` of a run trained on it points
at the file; `open_synthesized(path)` reads a result back (the app does, after a job).

Work goes in batches of BATCH prompts (`synthesis_asking`) with a tqdm bar (and
`progress(phase, done, total)` for the job runner, `synthesis_jobs`); Ctrl-C, or a cancelled
job, stops between requests and writes nothing. API
answers are in the response cache, so running it again does not pay for them twice.
"""

from __future__ import annotations

import os
from typing import Any

from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.judging.judges import as_judge
from dragonfarm_core.synthesis.asking import (
    Progress,
    PromptRow,
    as_llm,
    ask_rows,
    describe_model,
    judge_description,
    prompt_rows,
    score_rows,
    usage_of,
)
from dragonfarm_core.synthesis.files import (
    SynthesisError,
    SynthesizedDataset,
    output_path,
    record_of,
    write_result,
)
from dragonfarm_core.synthesis.pairs import synthesize_pairs
from dragonfarm_core.synthesis.quality import check_settings, fresh_prompts, quality_pass

# The public synthesis functions and what they return (`codegen` reads both signatures here).
__all__ = ["SynthesisError", "SynthesizedDataset", "synthesize", "synthesize_pairs"]

# Why a prompt gave no row, in the order the checks run; the record counts every one.
SYNTH_REASONS = {
    "empty_prompt": "the prompt is blank",
    "duplicate_prompt": "the prompt repeats an earlier prompt",
    "refusal": "the teacher refused",
    "empty": "the teacher's reply was empty",
    "error": "the request failed",
    "too_short": "shorter than min_chars",
    "too_long": "longer than max_chars",
    "garbled": "looks garbled (too few letters, or broken characters)",
    "duplicate_response": "repeats an earlier reply",
    "near_duplicate_response": "nearly repeats an earlier reply",
    "unscored": "the judge gave no score",
    "below_min_score": "the judge scored it below min_score",
}


def synthesize(
    prompts: Any,
    teacher: Any,
    system: str | None = None,
    max_new_tokens: int = 512,
    temperature: float = 0.7,
    judge: Any = None,
    min_score: float = 7,
    rubric: str | None = None,
    dedupe: bool = True,
    near_dup_threshold: float = 0.92,
    min_chars: int = 1,
    max_chars: int | None = None,
    min_alpha_ratio: float = 0,
    file: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    name: str = "synthetic",
    *,
    progress: Progress | None = None,
) -> SynthesizedDataset:
    """Ask `teacher` every prompt and keep its good replies as data to fine-tune on.

    prompts: a list of str, or a mapped dataset (its user turns and system prompts; its target
    replies become the judge's reference answers). teacher: an LLM function
    (`llm_anthropic`, `llm_openai`, `llm_chatlas`; it keeps its own sampling settings), a
    run, a model id or a model folder (answered locally with `max_new_tokens` and
    `temperature`), or a Python function from a list of prompts to a list of replies.
    system: the system prompt of every row (the teacher is asked with it unless it was built
    with one of its own); written into the data, so the student trains with it.

    The quality pass drops, in order: blank and (dedupe) repeated prompts, before asking;
    refusals, empty replies and errors; replies shorter than `min_chars` or longer than
    `max_chars` characters; garbled ones (broken characters, or a share of letters below
    `min_alpha_ratio`); with dedupe, replies that repeat an earlier kept one exactly or at
    `near_dup_threshold` similarity (0-1); with a `judge`, replies it scores below `min_score`
    (1-10) or cannot score. Returns the kept rows as a dataset mapped prompt -> response
    (and system), read from the JSONL written to `file` or under `runs_dir`; its `.synthesis`
    says how many came in, were kept, and were dropped per reason.
    """
    check_settings(
        "synthesize", max_new_tokens=max_new_tokens, temperature=temperature,
        min_score=min_score, near_dup_threshold=near_dup_threshold, min_chars=min_chars,
        max_chars=max_chars, min_alpha_ratio=min_alpha_ratio, name=name,
    )  # fmt: skip
    rows = prompt_rows(prompts, system)
    path = output_path(file, runs_dir, name)
    # Answers are cached in the runs dir named here, so a later session pays for none again.
    first = as_llm(teacher, None, max_new_tokens, temperature, runs_dir=runs_dir)
    if judge is not None:
        judge = as_judge(judge, runs_dir)

    asked, dropped = fresh_prompts(rows, dedupe)
    replies = ask_rows(
        lambda s: (
            as_llm(teacher, s, max_new_tokens, temperature, runs_dir=runs_dir) if s else first
        ),
        [rows[i] for i in asked],
        phase="teacher",
        progress=progress,
    )
    texts, more = quality_pass(
        asked, replies, min_chars=min_chars, max_chars=max_chars,
        min_alpha_ratio=min_alpha_ratio, dedupe=dedupe, threshold=float(near_dup_threshold),
    )  # fmt: skip
    dropped |= more
    scores: dict[int, float | None] = {}
    if judge is not None and texts:
        scores, more = _judge_gate(judge, rows, texts, rubric, min_score, progress)
        dropped |= more
    table = _table(rows, texts, scores if judge is not None else None)
    record = record_of("synthesize", SYNTH_REASONS, rows, dropped)
    record |= {
        "teacher": describe_model(first),
        "judge": judge_description(judge),
        "usage": {"teacher": usage_of(first)},
        "settings": {
            "system": system, "max_new_tokens": max_new_tokens, "temperature": temperature,
            "min_score": min_score if judge is not None else None, "rubric": rubric,
            "dedupe": dedupe, "near_dup_threshold": near_dup_threshold, "min_chars": min_chars,
            "max_chars": max_chars, "min_alpha_ratio": min_alpha_ratio,
        },
    }  # fmt: skip
    like = prompts if isinstance(prompts, Dataset) else None
    return write_result(path, table, record, name, pairs=False, like=like)


def _judge_gate(
    judge: Any,
    rows: list[PromptRow],
    texts: dict[int, str],
    rubric: str | None,
    min_score: float,
    progress: Progress | None,
) -> tuple[dict[int, float | None], dict[int, str]]:
    """(row -> the judge's score, row -> why it was dropped); the rows dropped leave `texts`."""
    scores: dict[int, float | None] = {}
    dropped: dict[int, str] = {}
    order = sorted(texts)
    got = score_rows(judge, [rows[i] for i in order], [texts[i] for i in order], rubric, progress)
    for i, score in zip(order, got, strict=True):
        scores[i] = score
        if score is None or score < min_score:
            dropped[i] = "unscored" if score is None else "below_min_score"
            del texts[i]
    return scores, dropped


def _table(
    rows: list[PromptRow], texts: dict[int, str], scores: dict[int, float | None] | None
) -> list[dict[str, Any]]:
    """The kept rows as written: prompt, response, system when there is one, the judge's score
    when there was a judge."""
    table = []
    for i in sorted(texts):
        row: dict[str, Any] = {"prompt": rows[i].prompt, "response": texts[i]}
        if rows[i].system:
            row["system"] = rows[i].system
        if scores is not None:
            row["score"] = scores[i]
        table.append(row)
    return table
