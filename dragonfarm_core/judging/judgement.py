"""`judge()`: did the model get better? A run's replies judged by a language model.

    j = dragon.judge(run, judge=dragon.judge_anthropic())                 # rubric: 1-10 scores
    j = dragon.judge(dpo, against="base", judge=dragon.judge_anthropic())  # pairwise, swapped
    j.summary; j.details                                                   # dict; one row a prompt
    dragon.prompts(run, "train", n=200)                                    # a run's user turns

Rubric mode scores each reply from 1 to 10 with a rationale, the held-out reference as ground
truth when there is one. Pairwise mode (`against` = "base", a run, a model id or folder) asks
each question twice with the two replies swapped: agreement is a win or a loss, a flip a tie,
so a judge that favours a position cannot bias the result (its position bias is reported).
Replies are generated greedily through the inference backend (`judge_inputs`), in batches; the
judge is asked through `judging`. Prompts default to the run's held-out rows: the same `n` rows,
chosen with `seed`, so runs sharing a dataset are judged on the same questions.

The result goes to the run's judge.json (mode, the judge described without secrets, summary,
one row per prompt), written atomically, and the summary (`judge_summary`) into the run's status.json under
"judge", where `runs()` (its judge column) and the comparison read it. From the app the same
work runs as a job (`batches/jobs.py`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dragonfarm_core.judging import judges as judging
from dragonfarm_core.judging.inputs import Row, generate_replies, opponent_of, rows_to_judge
from dragonfarm_core.judging.summary import judge_label, pairwise_summary, rubric_summary
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.rundir.store import run_home

SCHEMA = 1
# (done, total, stage): stage is "generating" or "judging".
Tick = Callable[[int, int, str], None]


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
    run = open_run(x)
    check_judgeable(run)
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 1
    ):
        raise ValueError(f"max_new_tokens = {max_new_tokens!r}; use a whole number, 1 or more.")
    fn = judging.as_judge(judge, run_home(run.dir))  # cached where the run lives
    rows, source = rows_to_judge(run, prompts, n, seed)
    opponent = opponent_of(run, against) if against is not None else None
    pairwise = opponent is not None
    total = len(rows) * (4 if pairwise else 2)  # replies to generate + judge answers
    tick_fn, close = _ticker(progress, f"judging {run.id}")
    done = 0

    def generated(k: int) -> None:
        nonlocal done
        done += k
        tick_fn(done, total, "generating")

    try:
        ours = generate_replies(run, rows, system, max_new_tokens, False, generated)
        theirs: list[str] = []
        if opponent is not None:
            model, base, _ = opponent
            theirs = generate_replies(model, rows, system, max_new_tokens, base, generated)
        asked_from = done
        tick_fn(done, total, "judging")  # the replies are in: the judge is being asked

        def judged(k: int, _: int) -> None:
            tick_fn(asked_from + k, total, "judging")

        settings = {"n": len(rows), "prompts_from": source, "seed": seed, "rubric": rubric,
                    "system": system, "max_new_tokens": max_new_tokens}  # fmt: skip
        named = opponent[2] if opponent is not None else None
        frame, summary = _judged(fn, rows, ours, theirs, named, rubric, system, judged)
    finally:
        close()
    mode = "rubric" if named is None else "pairwise"
    description = judging.describe_judge(fn)
    summary["judge"] = judge_label(description)
    summary["judged_at"] = files.now_iso()
    usage = getattr(fn, "usage", None)
    if isinstance(usage, dict):
        summary["usage"] = dict(usage)
    result = Judgement(run.id, mode, summary, frame, description, named, settings)
    save(run, result)
    return result


def _ticker(progress: Tick | bool, desc: str) -> tuple[Tick, Callable[[], None]]:
    """`judge`'s progress argument as a tick function and its closer: a tqdm bar (True), the
    function given, or nothing (False)."""
    if progress is True:
        return _progress_bar(desc)
    if callable(progress):
        return progress, lambda: None
    return (lambda done, total, stage: None), lambda: None


def _judged(
    fn: judging.Judge,
    rows: list[Row],
    ours: list[str],
    theirs: list[str],
    against: str | None,
    rubric: str | None,
    system: str | None,
    judged: judging.Progress,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(the details table, the summary): the replies scored (rubric mode, `against` None) or
    compared with `theirs` (pairwise)."""
    references = [r.reference for r in rows]
    systems = [system if system is not None else r.system for r in rows]
    shown_system = (
        system if system is not None else (systems[0] if len(set(systems)) == 1 else None)
    )
    frame = pd.DataFrame({"prompt": _column([r.prompt for r in rows]),
                          "reference": _column(references), "reply": _column(ours)})  # fmt: skip
    if against is None:
        scores = judging.score_replies(fn, frame["prompt"].tolist(), ours, rubric=rubric,
                                       references=references, system=shown_system,
                                       progress=judged)  # fmt: skip
        frame["score"] = [s.score for s in scores]
        frame["rationale"] = _column([s.rationale for s in scores])
        frame["failure"] = _column([s.failure for s in scores])
        return frame, rubric_summary(scores)
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
    return frame, pairwise_summary(verdicts, against)


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


def save(run: Run, result: Judgement) -> None:
    """judge.json (atomically) and the summary into status.json's "judge"."""
    files.write_json(run.dir / files.JUDGE, result.to_dict())
    files.update_status(run.dir, judge=result.summary)


def read_judgement(run: Run | str | os.PathLike[str]) -> Judgement | None:
    """The run's latest judgement, from judge.json; None when it was never judged."""
    run = open_run(run)
    stored = files.read_record(run.dir / files.JUDGE)  # torn or damaged: as never judged
    if stored is None or stored.get("mode") not in ("rubric", "pairwise"):
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
