"""Synthesis's inputs and its calls: the prompts to answer, the models that answer and judge
them, and asking them in batches.

    rows = prompt_rows(["How do I reset my password?"], system=persona)
    replies = ask_rows(lambda system: as_llm(teacher, system, 512, 0.7), rows)   # [[Reply]]
    scores = score_rows(judge, rows, [r[0].text for r in replies], rubric=None)  # [8.0, ...]

A teacher or student is what `as_llm` takes (an LLM, a run / model id / folder answered
locally, or a plain function); a judge is what `judging.as_judge` takes, and it is scored by
`judging.score_replies`, the one scorer. Rows are asked in batches of BATCH with a tqdm bar and
`progress(phase, done, total)`, so a cancel lands between requests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.llm.base import LLM, Reply

BATCH = 16  # prompts per call: a tqdm step, and how often a cancel is seen between calls


@dataclass(frozen=True)
class PromptRow:
    """One prompt to answer: the user turn, its system prompt, and a reference answer when the
    data had one (the judge sees it)."""

    prompt: str
    system: str | None = None
    reference: str | None = None


# -- inputs ---------------------------------------------------------------------------------


def prompt_rows(prompts: Any, system: str | None = None) -> list[PromptRow]:
    """The prompts to answer, from a list of str or a mapped `Dataset` (its user turns, their
    system prompt and target reply). `system`, when given, replaces every row's system."""
    if system is not None and not isinstance(system, str):
        raise TypeError("system must be a str or None.")
    if isinstance(prompts, Dataset):
        rows = _dataset_rows(prompts)
    elif isinstance(prompts, str) or not isinstance(prompts, Iterable):
        raise TypeError(
            f"prompts must be a list of str or a mapped dragon.dataset(...), got "
            f"{type(prompts).__name__}; wrap a single prompt in a list: [prompt]."
        )
    else:
        items = list(prompts)
        bad = [i for i, p in enumerate(items) if not isinstance(p, str | PromptRow)]
        if bad:
            raise TypeError(
                f"prompts[{bad[0]}] is {type(items[bad[0]]).__name__}; every prompt must be a str."
            )
        rows = [p if isinstance(p, PromptRow) else PromptRow(p) for p in items]
    if system is not None:
        rows = [PromptRow(r.prompt, system or None, r.reference) for r in rows]
    return rows


def _dataset_rows(ds: Dataset) -> list[PromptRow]:
    if ds.mapping is None:
        raise DatasetError(
            f"{ds.label} is not mapped yet: say which column holds the prompt, e.g. "
            f".map_prompts(prompt={ds.columns[0]!r}) (any mapping works: its user turns are used)."
        )
    rows = []
    for record in ds.records():
        turns = record["messages"] if "messages" in record else record["prompt"]
        target: str | None = None
        if "messages" in record and turns and turns[-1]["role"] == "assistant":
            turns, target = turns[:-1], turns[-1]["content"]
        elif "chosen" in record:
            target = record["chosen"][-1]["content"]
        elif "reference" in record:
            target = record["reference"]
        users = [m["content"] for m in turns if m["role"] == "user"]
        system = turns[0]["content"] if turns and turns[0]["role"] == "system" else None
        if users:  # a conversation opened by the assistant has no user turn to answer
            rows.append(PromptRow(users[-1], system, target))
    return rows


class CallableLLM:
    """A plain Python function from a list of prompts to a list of replies (str or `Reply`),
    as a teacher or student. It gets no system prompt: build it with one if it needs one."""

    def __init__(self, f: Callable[[list[str]], Sequence[Any]]) -> None:
        self.f = f

    def describe(self) -> dict[str, Any]:
        name = getattr(self.f, "__qualname__", None) or type(self.f).__name__
        return {"provider": "python", "function": f"{getattr(self.f, '__module__', '')}.{name}"}

    def __call__(self, prompts: list[str]) -> list[Reply]:
        out = list(self.f(list(prompts)))
        if len(out) != len(prompts):
            raise ValueError(
                f"{self.describe()['function']} returned {len(out)} replies for {len(prompts)} "
                "prompts; a teacher or student returns one reply per prompt, in order."
            )
        return [as_reply(r) for r in out]


def as_reply(value: Any) -> Reply:
    if isinstance(value, Reply):
        return value
    text = "" if value is None else str(value).strip()
    return Reply(text=text, empty=not text)


def as_llm(
    x: Any,
    system: str | None,
    max_new_tokens: int,
    temperature: float,
    what: str = "teacher",
    seed: int | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """`x` as a function from prompts to Replies: an LLM as it is (with `system` when it has
    none of its own), a run / run directory / model id / model folder through the local
    inference backend (`llm_local`, with these sampling settings and seed), or a plain
    callable. An LLM keeps its response cache in `runs_dir` (None: the session's)."""
    if isinstance(x, LLM):
        return _with_system(x, system).caching_in(runs_dir)
    if isinstance(x, str | os.PathLike):
        from dragonfarm_core.llm import llm_local

        return llm_local(
            x, system=system, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
        ).caching_in(runs_dir)
    if callable(x):
        return CallableLLM(x)
    raise TypeError(
        f"{what} must be a language-model function (dragon.llm_anthropic(), llm_openai(), "
        f"llm_chatlas()), a run, a model id or folder, or a Python function from a list of "
        f"prompts to a list of replies; got {type(x).__name__}."
    )


def _with_system(f: LLM, system: str | None) -> LLM:
    """`f` asking with `system` when it was built without a system prompt of its own (one it
    was built with wins), sharing its key, client and usage counts."""
    if system is None or f.system is not None:
        return f
    return f.sharing(system=system)


def describe_model(f: Any) -> dict[str, Any]:
    describe = getattr(f, "describe", None)
    if callable(describe):
        return dict(describe())
    return CallableLLM(f).describe()


def usage_of(f: Any) -> dict[str, int] | None:
    usage = getattr(f, "usage", None)
    return dict(usage) if isinstance(usage, dict) else None


def judge_description(judge: Any) -> dict[str, Any] | None:
    """The judge described for the record (without keys); None without a judge."""
    if judge is None:
        return None
    from dragonfarm_core.judging.judges import as_judge, describe_judge

    return describe_judge(as_judge(judge))


# -- asking, in batches ---------------------------------------------------------------------


Progress = Callable[[str, int, int], None]


def _bar(total: int, desc: str) -> Any:
    from tqdm.auto import tqdm

    # disable=None: no bar when output is not a terminal (a job's log, a test).
    return tqdm(total=total, desc=desc, unit="prompt", disable=None)


def ask_rows(
    make: Callable[[str | None], Any],
    rows: list[PromptRow],
    n: int = 1,
    phase: str = "teacher",
    progress: Progress | None = None,
) -> list[list[Reply]]:
    """`n` replies per row, in order. Rows are asked in batches of BATCH, grouped by system
    prompt (`make(system)` gives the function for one); each batch is one call holding every
    row's n samples, so a local model generates them together."""
    out: list[list[Reply]] = [[] for _ in rows]
    by_system: dict[str | None, list[int]] = {}
    for i, row in enumerate(rows):
        by_system.setdefault(row.system, []).append(i)
    done = 0
    with _bar(len(rows), phase) as bar:
        for system, indices in by_system.items():
            f = make(system)
            for start in range(0, len(indices), BATCH):
                chunk = indices[start : start + BATCH]
                replies = f([rows[i].prompt for i in chunk for _ in range(n)])
                for k, i in enumerate(chunk):
                    out[i] = [as_reply(r) for r in replies[k * n : (k + 1) * n]]
                done += len(chunk)
                bar.update(len(chunk))
                if progress:
                    progress(phase, done, len(rows))
    return out


def score_rows(
    judge: Any,
    rows: list[PromptRow],
    replies: list[str],
    rubric: str | None,
    progress: Progress | None = None,
) -> list[float | None]:
    """The judge's 1-10 score of each (row, reply), None where it gave none (a refusal, an
    answer that would not parse after the re-ask). Scored by `judging.score_replies`, one call
    per system prompt (the judge sees what the reply was answering under)."""
    from dragonfarm_core.judging.judges import score_replies

    scores: dict[int, float | None] = {}
    by_system: dict[str | None, list[int]] = {}
    for i, row in enumerate(rows):
        by_system.setdefault(row.system, []).append(i)
    with _bar(len(rows), "judge") as bar:
        for system, part in by_system.items():
            before = len(scores)

            def step(done: int, total: int, before: int = before) -> None:
                bar.update(before + done - bar.n)
                if progress:
                    progress("judge", before + done, len(rows))

            refs = [rows[i].reference for i in part]
            got = score_replies(
                judge,
                [rows[i].prompt for i in part],
                [replies[i] for i in part],
                rubric=rubric,
                references=refs if any(r is not None for r in refs) else None,
                system=system,
                progress=step,
            )
            scores |= {i: _score_value(score) for i, score in zip(part, got, strict=True)}
            bar.update(len(scores) - bar.n)
    return [scores[i] for i in range(len(rows))]


def _score_value(score: Any) -> float | None:
    value = getattr(score, "score", None)
    return None if value is None else float(value)
