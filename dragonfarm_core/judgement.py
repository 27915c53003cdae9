"""`judge()`: did the model get better? A run's replies judged by a language model.

    j = dragon.judge(run, judge=dragon.judge_anthropic())                 # rubric: 1-10 scores
    j = dragon.judge(dpo, against="base", judge=dragon.judge_anthropic())  # pairwise, swapped
    j.summary; j.details                                                   # dict; one row a prompt
    dragon.prompts(run, "train", n=200)                                    # a run's user turns

Rubric mode scores each reply from 1 to 10 with a rationale, the held-out reference as ground
truth when there is one. Pairwise mode (`against` = "base", a run, a model id or folder) asks
each question twice with the two replies swapped: agreement is a win or a loss, a flip a tie,
so a judge that favours a position cannot bias the result (its position bias is reported).
Replies are generated greedily through the inference backend (`generate`), in batches; the
judge is asked through `judging`. Prompts default to the run's held-out rows: the same `n` rows,
chosen with `seed`, so runs sharing a dataset are judged on the same questions.

The result goes to the run's judge.json (mode, the judge described without secrets, summary,
one row per prompt), written atomically, and the summary into the run's status.json under
"judge", where `runs()` (its judge column) and the comparison read it. From the app the same
work runs as a job (`llm_jobs`).
"""

from __future__ import annotations

import math
import os
import random
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core import judging
from dragonfarm_core.generation import generate
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run, open_run

SCHEMA = 1
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval
INTERVAL = "wilson"
# (done, total, stage): stage is "generating" or "judging".
Tick = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Row:
    """One prompt of a run's data: the last user turn, its reference reply, its system turn."""

    prompt: str
    reference: str | None = None
    system: str | None = None


@dataclass(frozen=True, eq=False)
class Judgement:
    """What `judge()` returns (and judge.json holds): mode, summary, details.

    mode: "rubric" or "pairwise". summary: the headline figures (see `judge`). details: one row
    per prompt (the prompt, the reference, the run's reply, in pairwise mode the other reply,
    and the judge's verdicts and rationales)."""

    run_id: str
    mode: str
    summary: dict[str, Any]
    details: pd.DataFrame
    judge: dict[str, Any] = field(default_factory=dict)
    against: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """judge.json's content."""
        return {
            "schema": SCHEMA,
            "run": self.run_id,
            "mode": self.mode,
            "against": self.against,
            "judge": self.judge,
            "settings": self.settings,
            "summary": self.summary,
            "rows": _records(self.details),
        }

    def __repr__(self) -> str:
        return f"<Judgement of {self.run_id}: {self.summary.get('label')}>"


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as plain JSON values (NaN as None)."""
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in frame.astype(object).to_dict(orient="records")
    ]


# -- prompts -------------------------------------------------------------------------------------


def _row_of(record: Any) -> Row | None:
    """A record of data/<split>.jsonl (sft/conversations, pairs or prompts shape) as a Row."""
    if not isinstance(record, dict):
        return None
    messages = record.get("messages")
    if isinstance(messages, list):  # sft, conversations: the last user turn and what follows
        texts = [m for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
        users = [i for i, m in enumerate(texts) if m.get("role") == "user"]
        if not users:
            return None
        last = users[-1]
        after = [m["content"] for m in texts[last + 1 :] if m.get("role") == "assistant"]
        return Row(texts[last]["content"], after[0] if after else None, _system(texts))
    prompt = record.get("prompt")
    if isinstance(prompt, list):  # pairs, prompts
        texts = [m for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), str)]
        turns = [str(m["content"]) for m in texts if m.get("role") == "user"]
        if not turns:
            return None
        reference = record.get("reference")
        chosen = record.get("chosen")
        if reference is None and isinstance(chosen, list) and chosen:
            # A pair run's preferred reply is the nearest thing it has to a reference.
            reference = chosen[-1].get("content") if isinstance(chosen[-1], dict) else None
        return Row(turns[-1], reference if isinstance(reference, str) else None, _system(texts))
    return None


def _system(messages: list[dict[str, Any]]) -> str | None:
    systems = [m["content"] for m in messages if m.get("role") == "system"]
    return systems[0] if systems else None


def data_rows(
    run: Run | str | os.PathLike[str],
    split: str = "eval",
    n: int | float | None = None,
    seed: int = 42,
) -> list[Row]:
    """The rows of a run's data/<split>.jsonl as Rows: all of them in file order, or `n`
    chosen with `seed` (kept in file order), the same ones for every run of the same data."""
    run = open_run(run)
    if split not in ("eval", "train"):
        raise ValueError(f"split must be 'eval' (the held-out rows) or 'train', got {split!r}.")
    rows = [r for r in map(_row_of, files.read_jsonl(files.data_path(run.dir, split))) if r]
    if n is None or (isinstance(n, float) and math.isinf(n)):
        return rows
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n = {n!r}; use a whole number, 1 or more (None for all rows).")
    if n >= len(rows):
        return rows
    picked = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in picked]


def prompts(
    run: Run | str | os.PathLike[str],
    split: str = "eval",
    n: int | float | None = None,
    seed: int = 42,
) -> list[str]:
    """The user turns of a run's held-out ("eval") or training ("train") rows, for
    `synthesize_pairs` or `judge`: prompt/response, conversation, pair and prompt runs alike.
    n: how many (None, or math.inf, for all), chosen with `seed` and kept in file order."""
    return [r.prompt for r in data_rows(run, split, n, seed)]


# -- replies -------------------------------------------------------------------------------------


def _generate(
    x: Any,
    rows: list[Row],
    system: str | None,
    max_new_tokens: int,
    base: bool,
    tick: Callable[[int], None],
) -> list[str]:
    """Greedy replies to the rows, in order, a batch at a time; each row under `system`, else
    its own system turn (the one it was trained with)."""
    out: list[str] = [""] * len(rows)
    groups: dict[str | None, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(system if system is not None else row.system, []).append(i)
    for group_system, indexes in groups.items():
        for start in range(0, len(indexes), judging.BATCH):
            chunk = indexes[start : start + judging.BATCH]
            replies = generate(
                x,
                [rows[i].prompt for i in chunk],
                system=group_system,
                max_new_tokens=max_new_tokens,
                temperature=0.0,
                base=base,
            )
            for i, reply in zip(chunk, replies, strict=True):
                out[i] = reply
            tick(len(chunk))
    return out


def _opponent(x: Run, against: Any) -> tuple[Any, bool, str]:
    """(what generates the other replies, base?, how it is named)."""
    if isinstance(against, str) and against.strip().lower() == "base":
        return x, True, "base"
    if isinstance(against, Run):
        return against, False, against.id
    if isinstance(against, str | os.PathLike):
        if not str(against).strip():
            raise ValueError("against = '': use 'base', a run, a model id or a model folder.")
        other = judging.local_model(str(against))
        if not isinstance(other, Run) and files.is_run_dir(other):
            other = Run(other)
        return other, False, other.id if isinstance(other, Run) else str(against)
    raise TypeError(
        f"against must be None (rubric mode), 'base', a run, a model id or a model folder; "
        f"got {type(against).__name__}."
    )


# -- summaries -----------------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of k successes in n (95 % by default); None when n is 0."""
    if n <= 0:
        return None
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def _reply_failures(failures: Sequence[str | None]) -> dict[str, int]:
    """How many replies were refusals, empty or errors (never judged)."""
    kinds = Counter((f or "").split(":")[0] for f in failures)
    return {k: kinds.get(k, 0) for k in ("refusal", "empty", "error")}


def rubric_summary(scores: list[judging.Score]) -> dict[str, Any]:
    values = [s.score for s in scores if s.score is not None]
    k = len(values)
    mean = sum(values) / k if k else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1)) if mean is not None and k > 1 else None  # fmt: skip
    interval = None
    if mean is not None and sd is not None:
        half = Z95 * sd / math.sqrt(k)
        interval = [max(1.0, mean - half), min(10.0, mean + half)]
    failures = [s.failure for s in scores]
    summary = {
        "mode": "rubric",
        "n": len(scores),
        "scored": k,
        "mean_score": mean,
        "score_sd": sd,
        "mean_score_ci95": interval,
        "interval": "normal",
        "unparsed": sum(f == "unparsed" for f in failures),
        "judge_failed": sum(bool(f and f.startswith("judge ")) for f in failures),
        "replies_not_judged": _reply_failures([f for f in failures if f and _is_reply(f)]),
        "scores": {str(v): values.count(v) for v in sorted(set(values))},
    }
    summary["label"] = (
        f"score {mean:.1f}/10 (n={k})" if mean is not None else f"no scores (n={len(scores)})"
    )
    return summary


def _is_reply(failure: str) -> bool:
    return failure in ("refusal", "empty") or failure.startswith("error:")


def pairwise_summary(verdicts: list[judging.Verdict], against: str) -> dict[str, Any]:
    outcomes = Counter(v.outcome for v in verdicts if v.outcome)
    judged = sum(outcomes.values())
    wins, ties, losses = outcomes["win"], outcomes["tie"], outcomes["loss"]
    picks = [p for v in verdicts for p in v.picks if p in ("A", "B")]
    answer_failures = [f for v in verdicts for f in v.answer_failures if f]
    not_judged = [v.failure.split(": ", 1)[1] for v in verdicts if v.outcome is None and v.failure
                  and v.failure.startswith(("ours: ", "theirs: "))]  # fmt: skip
    summary = {
        "mode": "pairwise",
        "against": against,
        "n": len(verdicts),
        "judged": judged,
        "wins": wins,
        "ties": ties,
        "losses": losses,
        "win_rate": _share(wins, judged),
        "tie_rate": _share(ties, judged),
        "loss_rate": _share(losses, judged),
        "win_rate_ci95": wilson(wins, judged),
        "tie_rate_ci95": wilson(ties, judged),
        "loss_rate_ci95": wilson(losses, judged),
        "interval": INTERVAL,
        # Of the judge's answers that picked a side, the share that picked the one shown
        # first: 0.5 is no bias, 1.0 a judge that always takes the first.
        "position_bias": _share(picks.count("A"), len(picks)),
        "position_bias_n": len(picks),
        "unparsed": answer_failures.count("unparsed"),
        "judge_failed": sum(f.startswith("judge ") for f in answer_failures),
        "replies_not_judged": _reply_failures(not_judged),
    }
    summary["label"] = f"vs {against}: {wins}W {ties}T {losses}L (n={judged})"
    return summary


# -- judge ---------------------------------------------------------------------------------------


def _progress_bar(total_hint: str) -> tuple[Tick, Callable[[], None]]:
    """A tqdm bar as a tick function, and its closer."""
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc=total_hint, unit="step")

    def tick(done: int, total: int, stage: str) -> None:
        if bar.total != total:
            bar.total = total
        bar.set_postfix_str(stage, refresh=False)
        bar.update(done - bar.n)

    return tick, bar.close


def check_judgeable(run: Run) -> None:
    state = run.status().get("state")
    if state in files.ACTIVE_STATES:
        raise RuntimeError(f"Run {run.id} is still {state}; judge it once it has finished.")
    if state == "bundled":
        raise RuntimeError(
            f"Run {run.id} is bundled to train elsewhere; bring its results back with "
            "dragon.import_results(run, zip_path) before judging it."
        )


def _rows_to_judge(
    run: Run, given: Sequence[str] | None, n: int, seed: int
) -> tuple[list[Row], str]:
    if given is not None:
        if isinstance(given, str) or not all(isinstance(p, str) for p in given):
            raise TypeError("prompts must be a list of str (or None for the run's held-out rows).")
        if not given:
            raise ValueError("prompts is empty; pass at least one, or None for the held-out rows.")
        return [Row(p) for p in given], "given"
    rows = data_rows(run, "eval", n, seed)
    if rows:
        return rows, "eval"
    rows = data_rows(run, "train", n, seed)
    if not rows:
        raise ValueError(f"Run {run.id} has no prompts in its data; pass prompts=[...].")
    warnings.warn(
        f"Run {run.id} held no rows out; judging {len(rows)} of its training rows, which it "
        "has seen. Split the data (ds.split()) for a fair judgement.",
        UserWarning,
        stacklevel=3,
    )
    return rows, "train"


def judge(
    x: Run | str | os.PathLike[str],
    against: Any = None,
    prompts: Sequence[str] | None = None,
    n: int = 20,
    judge: Any = None,
    rubric: str | None = None,
    system: str | None = None,
    max_new_tokens: int = 256,
    seed: int = 42,
    *,
    progress: Tick | bool = True,
) -> Judgement:
    """Judge a finished run's replies with a language model; writes judge.json and the summary
    into the run's status.

    against: None scores each reply 1-10 against `rubric` (the reference as ground truth when
    the row has one); "base", a run, a model id or folder compares the run's replies with that
    model's, each question asked twice with the replies swapped (agreement: win or loss, a flip:
    tie). prompts: the questions (default: `n` of the run's held-out rows, chosen with `seed`).
    judge: an LLM (dragon.judge_anthropic(), dragon.judge_openai(...)), a run or model id for a
    local judge, or a function from prompts to answers; None is Claude when ANTHROPIC_API_KEY is
    set. system: the system prompt the replies are generated under (default: each row's own).
    Replies are greedy, up to `max_new_tokens`. progress: a tqdm bar (True), none (False), or a
    function (done, total, stage).

    The summary: rubric mode, mean_score with a 95 % normal interval and the score counts;
    pairwise mode, wins/ties/losses with their shares and 95 % Wilson intervals, and
    position_bias (of the answers that picked a side, the share that picked the first shown).
    Both: unparsed (judge answers unusable after one re-ask, never guessed), judge_failed, and
    replies_not_judged (refusals, empty replies, errors: recorded, never scored).
    """
    run = open_run(x)
    check_judgeable(run)
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 1
    ):
        raise ValueError(f"max_new_tokens = {max_new_tokens!r}; use a whole number, 1 or more.")
    fn = judging.as_judge(judge)
    rows, source = _rows_to_judge(run, prompts, n, seed)
    opponent = _opponent(run, against) if against is not None else None
    pairwise = opponent is not None
    total = len(rows) * (4 if pairwise else 2)  # replies to generate + judge answers
    close: Callable[[], None] = lambda: None  # noqa: E731
    if progress is True:
        tick_fn, close = _progress_bar(f"judging {run.id}")
    elif callable(progress):
        tick_fn = progress
    else:
        tick_fn = lambda done, total, stage: None  # noqa: E731
    done = 0

    def generated(k: int) -> None:
        nonlocal done
        done += k
        tick_fn(done, total, "generating")

    try:
        ours = _generate(run, rows, system, max_new_tokens, False, generated)
        theirs: list[str] = []
        if opponent is not None:
            model, base, _ = opponent
            theirs = _generate(model, rows, system, max_new_tokens, base, generated)
        asked_from = done
        tick_fn(done, total, "judging")  # the replies are in: the judge is being asked

        def judged(k: int, _: int) -> None:
            tick_fn(asked_from + k, total, "judging")

        settings = {"n": len(rows), "prompts_from": source, "seed": seed, "rubric": rubric,
                    "system": system, "max_new_tokens": max_new_tokens}  # fmt: skip
        references = [r.reference for r in rows]
        systems = [system if system is not None else r.system for r in rows]
        shown_system = (
            system if system is not None else (systems[0] if len(set(systems)) == 1 else None)
        )
        frame = pd.DataFrame({"prompt": _column([r.prompt for r in rows]),
                              "reference": _column(references), "reply": _column(ours)})  # fmt: skip
        if opponent is None:
            scores = judging.score_replies(fn, frame["prompt"].tolist(), ours, rubric=rubric,
                                           references=references, system=shown_system,
                                           progress=judged)  # fmt: skip
            frame["score"] = [s.score for s in scores]
            frame["rationale"] = _column([s.rationale for s in scores])
            frame["failure"] = _column([s.failure for s in scores])
            summary, mode, named = rubric_summary(scores), "rubric", None
        else:
            named = opponent[2]
            verdicts = judging.compare_replies(fn, frame["prompt"].tolist(), ours, theirs,
                                               rubric=rubric, references=references,
                                               system=shown_system, progress=judged)  # fmt: skip
            frame["against_reply"] = _column(theirs)
            frame["outcome"] = _column([v.outcome for v in verdicts])
            frame["pick_ours_first"] = _column([v.picks[0] for v in verdicts])
            frame["pick_ours_second"] = _column([v.picks[1] for v in verdicts])
            frame["rationale_ours_first"] = _column([v.rationales[0] for v in verdicts])
            frame["rationale_ours_second"] = _column([v.rationales[1] for v in verdicts])
            frame["failure"] = _column([v.failure for v in verdicts])
            summary, mode = pairwise_summary(verdicts, named), "pairwise"
    finally:
        close()
    description = judging.describe_judge(fn)
    summary["judge"] = _judge_label(description)
    summary["judged_at"] = files.now_iso()
    usage = getattr(fn, "usage", None)
    if isinstance(usage, dict):
        summary["usage"] = dict(usage)
    result = Judgement(run.id, mode, summary, frame, description, named, settings)
    save(run, result)
    return result


def _column(values: list[Any]) -> pd.Series:
    """A column of text that keeps None as None (pandas' string inference would make it NaN)."""
    return pd.Series(values, dtype=object)


def _frame(rows: list[Any]) -> pd.DataFrame:
    """judge.json's rows as the details table: text columns keep None, scores are numbers."""
    rows = [r for r in rows if isinstance(r, dict)]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    frame = pd.DataFrame({k: _column([r.get(k) for r in rows]) for k in keys})
    if "score" in frame:
        frame["score"] = pd.to_numeric(frame["score"], errors="coerce")
    return frame


def _judge_label(description: dict[str, Any]) -> str:
    model = str(description.get("model") or "")
    provider = description.get("provider")
    if provider == "local":
        model = Path(model).name or model
    return f"{provider}:{model}" if provider else model


def save(run: Run, result: Judgement) -> None:
    """judge.json (atomically) and the summary into status.json's "judge"."""
    files.write_json(run.dir / files.JUDGE, result.to_dict())
    files.update_status(run.dir, judge=result.summary)


def read_judgement(run: Run | str | os.PathLike[str]) -> Judgement | None:
    """The run's latest judgement, from judge.json; None when it was never judged."""
    run = open_run(run)
    stored = files.read_json(run.dir / files.JUDGE)
    if not isinstance(stored, dict) or stored.get("mode") not in ("rubric", "pairwise"):
        return None
    return Judgement(
        run_id=str(stored.get("run") or run.id),
        mode=stored["mode"],
        summary=dict(stored.get("summary") or {}),
        details=_frame(stored.get("rows") or []),
        judge=dict(stored.get("judge") or {}),
        against=stored.get("against"),
        settings=dict(stored.get("settings") or {}),
    )
