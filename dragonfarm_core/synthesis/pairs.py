"""`synthesize_pairs`: preference pairs from a model's own samples, ranked by a judge.

    pairs = dragon.synthesize_pairs(dragon.prompts(sft, "train"), student=sft,
                                    judge=dragon.judge_anthropic())
    dpo = dragon.prefer(pairs, sft)

Judge mode samples the student `n_samples` times per prompt in one batched call and keeps the
judge's best against its worst when they are `min_gap` apart; teacher mode takes a teacher's
reply as chosen and the student's as rejected (with a judge too, only when the teacher's wins
by `min_gap`). What is kept is written like `synthesize`'s result (`synthesis_files`).
"""

from __future__ import annotations

import os
from typing import Any

from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.judging.judges import as_judge
from dragonfarm_core.llm.base import Reply
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
from dragonfarm_core.synthesis.files import SynthesizedDataset, output_path, record_of, write_result
from dragonfarm_core.synthesis.quality import check_settings, fresh_prompts, reply_reason

# Why a prompt gave no pair, in the order the checks run; the record counts every one.
PAIR_REASONS = {
    "empty_prompt": "the prompt is blank",
    "duplicate_prompt": "the prompt repeats an earlier prompt",
    "too_few_samples": "fewer than two usable samples (refusals, empty replies, errors)",
    "teacher_failed": "the teacher's reply was a refusal, empty or an error",
    "student_failed": "the student's reply was a refusal, empty or an error",
    "identical": "the replies are identical",
    "unscored": "the judge could not score enough of the replies",
    "too_close": "the best and worst scores are less than min_gap apart",
}


def synthesize_pairs(
    prompts: Any,
    student: Any,
    judge: Any = None,
    teacher: Any = None,
    n_samples: int = 4,
    min_gap: float = 2,
    rubric: str | None = None,
    system: str | None = None,
    temperature: float = 0.8,
    max_new_tokens: int = 256,
    seed: int | None = 42,
    file: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    name: str = "preferences",
    *,
    progress: Progress | None = None,
) -> SynthesizedDataset:
    """Preference pairs without hand labelling, from the student's own replies.

    Judge mode (`judge=`): the student answers each prompt `n_samples` times (one batched
    call, at `temperature`), the judge scores each distinct sample 1-10, and the best becomes
    chosen, the worst rejected, when their scores are at least `min_gap` apart (never tied);
    prompts with
    fewer than two usable samples, only identical samples, or too close a gap are dropped.
    Teacher mode (`teacher=`): the teacher's reply is chosen and one student sample rejected
    (identical pairs dropped); given a judge too, both are scored and the pair is kept only
    when the teacher's wins by `min_gap`. student and teacher are what `synthesize` takes as a
    teacher. `seed` fixes the samples of a run or model answered locally (the same prompts
    and seed give the same pairs; None samples afresh); an LLM or plain function samples as
    it was built to. Returns a dataset mapped with `map_pairs` (and system), ready for
    `prefer()`; with a judge the file records chosen_score and rejected_score.
    """
    if judge is None and teacher is None:
        raise ValueError(
            "synthesize_pairs needs a judge (to rank the student's own samples) or a teacher "
            "(whose reply is preferred to the student's); pass judge= or teacher=."
        )
    check_settings(
        "synthesize_pairs", max_new_tokens=max_new_tokens, temperature=temperature,
        min_gap=min_gap, n_samples=n_samples if teacher is None else 2, name=name, seed=seed,
    )  # fmt: skip
    rows = prompt_rows(prompts, system)
    path = output_path(file, runs_dir, name)
    # Answers are cached in the runs dir named here, so a later session pays for none again.
    first = as_llm(student, None, max_new_tokens, temperature, "student", seed, runs_dir)
    if judge is not None:
        judge = as_judge(judge, runs_dir)

    def student_for(s: str | None) -> Any:
        return (
            as_llm(student, s, max_new_tokens, temperature, "student", seed, runs_dir)
            if s
            else first
        )

    asked, dropped = fresh_prompts(rows, dedupe=True)
    todo = [rows[i] for i in asked]
    if teacher is None:
        samples = ask_rows(student_for, todo, n=n_samples, phase="student", progress=progress)
        table, more = _judged_pairs(judge, todo, samples, min_gap, rubric, progress)
        mode, teacher_f = "judge", None
    else:

        def teacher_for(s: str | None) -> Any:
            return as_llm(teacher, s, max_new_tokens, temperature, seed=seed, runs_dir=runs_dir)

        teacher_f = teacher_for(None)
        chosen = ask_rows(
            lambda s: teacher_for(s) if s else teacher_f, todo, phase="teacher", progress=progress
        )
        rejected = ask_rows(student_for, todo, phase="student", progress=progress)
        table, more = _taught_pairs(judge, todo, chosen, rejected, min_gap, rubric, progress)
        samples, mode = rejected, "teacher"
    dropped |= {asked[k]: reason for k, reason in more.items()}
    record = record_of("synthesize_pairs", PAIR_REASONS, rows, dropped)
    record |= {
        "mode": mode,
        "student": describe_model(first),
        "teacher": describe_model(teacher_f) if teacher_f is not None else None,
        "judge": judge_description(judge),
        "samples": _sample_counts(samples),
        "usage": {"student": usage_of(first), "teacher": usage_of(teacher_f)},
        "settings": {
            "system": system, "n_samples": n_samples if teacher is None else 1,
            "min_gap": min_gap if judge is not None else None, "rubric": rubric,
            "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
        },
    }  # fmt: skip
    for row in table:
        k = row.pop("_row")
        if todo[k].system:
            row["system"] = todo[k].system
    like = prompts if isinstance(prompts, Dataset) else None
    return write_result(path, table, record, name, pairs=True, like=like)


def _sample_counts(samples: list[list[Reply]]) -> dict[str, int]:
    counts = {"asked": 0, "ok": 0, "refusal": 0, "empty": 0, "error": 0}
    for reply in (r for group in samples for r in group):
        counts["asked"] += 1
        counts[reply_reason(reply) or "ok"] += 1
    return counts


def _judged_pairs(
    judge: Any,
    rows: list[PromptRow],
    samples: list[list[Reply]],
    min_gap: float,
    rubric: str | None,
    progress: Progress | None,
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Best against worst of each row's samples, scored once per distinct text."""
    dropped: dict[int, str] = {}
    distinct: dict[int, list[str]] = {}
    for k, group in enumerate(samples):
        ok = [r.text.strip() for r in group if reply_reason(r) is None]
        unique = list(dict.fromkeys(ok))
        if len(ok) < 2:
            dropped[k] = "too_few_samples"
        elif len(unique) < 2:
            dropped[k] = "identical"
        else:
            distinct[k] = unique
    flat = [(k, text) for k, texts in distinct.items() for text in texts]
    got = score_rows(judge, [rows[k] for k, _ in flat], [t for _, t in flat], rubric, progress)
    scored: dict[int, list[tuple[float, str]]] = {}
    for (k, text), score in zip(flat, got, strict=True):
        if score is not None:
            scored.setdefault(k, []).append((score, text))
    table = []
    for k in distinct:
        ranked = scored.get(k, [])
        if len(ranked) < 2:
            dropped[k] = "unscored"
            continue
        # The first of the top scores, the last of the bottom ones: ties keep sample order.
        best = max(ranked, key=lambda s: s[0])
        worst = min(reversed(ranked), key=lambda s: s[0])
        if best[0] - worst[0] < min_gap or best[0] == worst[0]:
            dropped[k] = "too_close"
            continue
        table.append(_pair(k, rows[k], best[1], worst[1], best[0], worst[0]))
    return table, dropped


def _taught_pairs(
    judge: Any,
    rows: list[PromptRow],
    chosen: list[list[Reply]],
    rejected: list[list[Reply]],
    min_gap: float,
    rubric: str | None,
    progress: Progress | None,
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The teacher's reply over the student's; with a judge, only when it wins by min_gap."""
    dropped: dict[int, str] = {}
    keep = []
    for k, ([good], [bad]) in enumerate(zip(chosen, rejected, strict=True)):
        if reply_reason(good):
            dropped[k] = "teacher_failed"
        elif reply_reason(bad):
            dropped[k] = "student_failed"
        elif good.text.strip() == bad.text.strip():
            dropped[k] = "identical"
        else:
            keep.append(k)
    texts = {k: (chosen[k][0].text.strip(), rejected[k][0].text.strip()) for k in keep}
    if judge is None:
        return [_pair(k, rows[k], *texts[k]) for k in keep], dropped
    both = [rows[k] for k in keep for _ in (0, 1)]
    got = score_rows(judge, both, [t for k in keep for t in texts[k]], rubric, progress)
    table = []
    for j, k in enumerate(keep):
        good_score, bad_score = got[2 * j], got[2 * j + 1]
        if good_score is None or bad_score is None:
            dropped[k] = "unscored"
        elif good_score - bad_score < min_gap or good_score <= bad_score:
            dropped[k] = "too_close"
        else:
            table.append(_pair(k, rows[k], *texts[k], good_score, bad_score))
    return table, dropped


def _pair(
    k: int,
    row: PromptRow,
    chosen: str,
    rejected: str,
    chosen_score: float | None = None,
    rejected_score: float | None = None,
) -> dict[str, Any]:
    pair: dict[str, Any] = {"_row": k, "prompt": row.prompt, "chosen": chosen, "rejected": rejected}
    if chosen_score is not None:
        pair |= {"chosen_score": chosen_score, "rejected_score": rejected_score}
    return pair
