"""Synthesis: training data from a teacher, and preference pairs from a model's own samples.

    teacher = dragon.llm_anthropic(system=persona)
    synth = dragon.synthesize(tickets, teacher, system=persona)  # a Dataset mapped for SFT
    synth.synthesis["dropped"]                                   # {"too_short": 2, ...}
    pairs = dragon.synthesize_pairs(dragon.prompts(sft, "train"), student=sft,
                                    judge=dragon.judge_anthropic())
    dpo = dragon.prefer(pairs, sft)

`synthesize` asks the teacher once per prompt, then a quality pass drops replies that failed
(a refusal, an empty answer, an error), are too short or too long, look garbled, or repeat or
nearly repeat an earlier reply (`data.neardup.repeats`, the data report's MinHash/rapidfuzz
code); prompts that repeat an earlier prompt are dropped before anyone is asked. With a judge,
only replies scoring at least `min_score` stay (scored by `judging.score_replies`, the one
scorer). `synthesize_pairs` samples the student `n_samples` times per prompt in one batched
call and keeps the judge's best against its worst when they are `min_gap` apart, or takes a
teacher's reply as chosen and the student's as rejected.

What is kept is written atomically as JSONL (under `<runs_dir>/synthetic/` unless `file=`),
next to `<same name>.synthesis.json`, the record of what happened: counts in, kept, dropped
per reason, who answered and judged (descriptions without keys) and the settings. The result is
that file read back through the public data API, so `code(run)` of a run trained on it points
at the file; `open_synthesized(path)` reads a result back (the app does, after a job).

Work goes in batches of BATCH prompts with a tqdm bar (and `progress(phase, done, total)` for
the job runner); Ctrl-C, or a cancelled job, stops between requests and writes nothing. API
answers are in the response cache, so running it again does not pay for them twice.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dragonfarm_core.data.dataset import Dataset, dataset
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.neardup import repeats
from dragonfarm_core.llm.base import LLM, Reply
from dragonfarm_core.rundir import files, location

BATCH = 16  # prompts per call: a tqdm step, and how often a cancel is seen between calls
RECORD_SUFFIX = ".synthesis.json"
EXAMPLES_PER_REASON = 3  # dropped rows kept in the record per reason, to show what went

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
# A character that only shows up in broken text: the replacement character (bytes that were
# not valid in their encoding) or a control character other than tab and newlines.
_BROKEN = re.compile(r"[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TAG = re.compile(r"[^A-Za-z0-9._-]+")


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
        return [_as_reply(r) for r in out]


def _as_reply(value: Any) -> Reply:
    if isinstance(value, Reply):
        return value
    text = "" if value is None else str(value).strip()
    return Reply(text=text, empty=not text)


def as_llm(
    x: Any, system: str | None, max_new_tokens: int, temperature: float, what: str = "teacher"
) -> Any:
    """`x` as a function from prompts to Replies: an LLM as it is (with `system` when it has
    none of its own), a run / run directory / model id / model folder through the local
    inference backend (`llm_local`, with these sampling settings), or a plain callable."""
    if isinstance(x, LLM):
        return _with_system(x, system)
    if isinstance(x, str | os.PathLike):
        from dragonfarm_core.llm import llm_local

        return llm_local(x, system=system, max_new_tokens=max_new_tokens, temperature=temperature)
    if callable(x):
        return CallableLLM(x)
    raise TypeError(
        f"{what} must be a language-model function (dragon.llm_anthropic(), llm_openai(), "
        f"llm_chatlas()), a run, a model id or folder, or a Python function from a list of "
        f"prompts to a list of replies; got {type(x).__name__}."
    )


def _with_system(f: LLM, system: str | None) -> LLM:
    """`f` asking with `system` when it was built without a system prompt of its own (one it
    was built with wins). A shallow copy that shares the key, client and usage counts:
    `copy.copy` goes through `__getstate__`, which drops a key typed in."""
    if system is None or f.system is not None:
        return f
    g = type(f).__new__(type(f))
    g.__dict__.update(f.__dict__)
    g.system = system
    return g


def _describe(f: Any) -> dict[str, Any]:
    describe = getattr(f, "describe", None)
    if callable(describe):
        return dict(describe())
    return CallableLLM(f).describe()


def _usage(f: Any) -> dict[str, int] | None:
    usage = getattr(f, "usage", None)
    return dict(usage) if isinstance(usage, dict) else None


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
                    out[i] = [_as_reply(r) for r in replies[k * n : (k + 1) * n]]
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
    from dragonfarm_core.judging import score_replies

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


# -- the quality pass -----------------------------------------------------------------------


def garbled(text: str, min_alpha_ratio: float = 0.0) -> bool:
    """Broken characters (U+FFFD, control characters), or fewer letters among the visible
    characters than `min_alpha_ratio` (0.5: at least half of them letters)."""
    if _BROKEN.search(text):
        return True
    visible = [c for c in text if not c.isspace()]
    if not visible or min_alpha_ratio <= 0:
        return False
    letters = sum(unicodedata.category(c).startswith("L") for c in visible)
    return letters / len(visible) < min_alpha_ratio


def _reply_reason(reply: Reply) -> str | None:
    if reply.refusal:
        return "refusal"
    if reply.error:
        return "error"
    if reply.empty or not reply.text.strip():
        return "empty"
    return None


def _fresh_prompts(rows: list[PromptRow], dedupe: bool) -> tuple[list[int], dict[int, str]]:
    """Indexes of the rows worth asking, and the reason of each one that is not."""
    seen: set[tuple[str, str | None]] = set()
    keep, dropped = [], {}
    for i, row in enumerate(rows):
        key = (row.prompt.strip(), row.system)
        if not key[0]:
            dropped[i] = "empty_prompt"
        elif dedupe and key in seen:
            dropped[i] = "duplicate_prompt"
        else:
            seen.add(key)
            keep.append(i)
    return keep, dropped


# -- records and files ----------------------------------------------------------------------


def _record(
    kind: str, reasons: dict[str, str], rows: list[PromptRow], dropped: dict[int, str]
) -> dict[str, Any]:
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
    tag = _TAG.sub("-", name).strip("-.")
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


def _write(
    path: Path,
    table: list[dict[str, Any]],
    record: dict[str, Any],
    name: str,
    pairs: bool,
    like: Dataset | None,
) -> SynthesizedDataset:
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
    record = files.read_json(record_path(path))
    if not isinstance(record, dict) or record.get("kind") not in ("synthesize", "synthesize_pairs"):
        raise FileNotFoundError(
            f"{record_path(path)} is missing or is not a synthesis record; {path.name} was not "
            "written by dragon.synthesize() or dragon.synthesize_pairs()."
        )
    rows = files.read_jsonl(path)
    pairs = record["kind"] == "synthesize_pairs"
    ds = _mapped(path, record.get("name") or path.stem, pairs, any(r.get("system") for r in rows))
    return _with_record(ds, record)


# -- checks ---------------------------------------------------------------------------------


def _whole(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} = {value!r}; use a whole number, {low} or more.")
    return value


def _number(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} = {value!r}; use a number from {low:g} to {high:g}.")
    return float(value)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _TAG.sub("", name).strip("-."):
        raise ValueError(f"name = {name!r}: use letters, digits, '-', '_' or '.'.")
    return name


def check_settings(function: str, **settings: Any) -> None:
    """Refuse a setting of `synthesize` / `synthesize_pairs` that is out of range, naming it
    (also what the app checks before it starts a job)."""
    given = {k: v for k, v in settings.items() if v is not None or k == "max_chars"}
    checks: dict[str, Callable[[Any], Any]] = {
        "max_new_tokens": lambda v: _whole("max_new_tokens", v, 1),
        "temperature": lambda v: _number("temperature", v, 0, 2),
        "name": _check_name,
    }
    if function == "synthesize":
        min_chars = _whole("min_chars", given.get("min_chars", 1), 0)
        checks |= {
            "min_score": lambda v: _number("min_score", v, 1, 10),
            "near_dup_threshold": lambda v: _number("near_dup_threshold", v, 0.01, 1),
            "max_chars": lambda v: v is None or _whole("max_chars", v, max(1, min_chars)),
            "min_alpha_ratio": lambda v: _number("min_alpha_ratio", v, 0, 1),
        }
    else:
        checks |= {
            "min_gap": lambda v: _number("min_gap", v, 0, 9),
            "n_samples": lambda v: _whole("n_samples", v, 2),
        }
    for key, value in given.items():
        if key in checks:
            checks[key](value)


# -- synthesize -----------------------------------------------------------------------------


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
    threshold = float(near_dup_threshold)
    rows = prompt_rows(prompts, system)
    path = output_path(file, runs_dir, name)
    first = as_llm(teacher, None, max_new_tokens, temperature)

    asked, dropped = _fresh_prompts(rows, dedupe)
    replies = ask_rows(
        lambda s: as_llm(teacher, s, max_new_tokens, temperature) if s else first,
        [rows[i] for i in asked],
        phase="teacher",
        progress=progress,
    )
    texts: dict[int, str] = {}
    for i, [reply] in zip(asked, replies, strict=True):
        text = reply.text.strip()
        reason = _reply_reason(reply)
        if reason is None and len(text) < min_chars:
            reason = "too_short"
        elif reason is None and max_chars is not None and len(text) > max_chars:
            reason = "too_long"
        elif reason is None and garbled(text, min_alpha_ratio):
            reason = "garbled"
        if reason:
            dropped[i] = reason
        else:
            texts[i] = text
    if dedupe:
        order = sorted(texts)
        for i, seen in zip(order, repeats([texts[i] for i in order], threshold * 100), strict=True):
            if seen is not None:
                dropped[i] = (
                    "duplicate_response" if seen[0] == "exact" else "near_duplicate_response"
                )
                del texts[i]
    scores: dict[int, float | None] = {}
    if judge is not None and texts:
        order = sorted(texts)
        got = score_rows(
            judge, [rows[i] for i in order], [texts[i] for i in order], rubric, progress
        )
        for i, score in zip(order, got, strict=True):
            scores[i] = score
            if score is None or score < min_score:
                dropped[i] = "unscored" if score is None else "below_min_score"
                del texts[i]

    table = []
    for i in sorted(texts):
        row: dict[str, Any] = {"prompt": rows[i].prompt, "response": texts[i]}
        if rows[i].system:
            row["system"] = rows[i].system
        if judge is not None:
            row["score"] = scores[i]
        table.append(row)
    record = _record("synthesize", SYNTH_REASONS, rows, dropped)
    record |= {
        "teacher": _describe(first),
        "judge": _judge_description(judge),
        "usage": {"teacher": _usage(first)},
        "settings": {
            "system": system, "max_new_tokens": max_new_tokens, "temperature": temperature,
            "min_score": min_score if judge is not None else None, "rubric": rubric,
            "dedupe": dedupe, "near_dup_threshold": near_dup_threshold, "min_chars": min_chars,
            "max_chars": max_chars, "min_alpha_ratio": min_alpha_ratio,
        },
    }  # fmt: skip
    like = prompts if isinstance(prompts, Dataset) else None
    return _write(path, table, record, name, pairs=False, like=like)


def _judge_description(judge: Any) -> dict[str, Any] | None:
    if judge is None:
        return None
    from dragonfarm_core.judging import as_judge, describe_judge

    return describe_judge(as_judge(judge))


# -- synthesize_pairs -----------------------------------------------------------------------


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
    teacher. Returns a dataset mapped with `map_pairs` (and system), ready for `prefer()`;
    with a judge the file records chosen_score and rejected_score.
    """
    if judge is None and teacher is None:
        raise ValueError(
            "synthesize_pairs needs a judge (to rank the student's own samples) or a teacher "
            "(whose reply is preferred to the student's); pass judge= or teacher=."
        )
    check_settings(
        "synthesize_pairs", max_new_tokens=max_new_tokens, temperature=temperature,
        min_gap=min_gap, n_samples=n_samples if teacher is None else 2, name=name,
    )  # fmt: skip
    rows = prompt_rows(prompts, system)
    path = output_path(file, runs_dir, name)
    first = as_llm(student, None, max_new_tokens, temperature, "student")

    def student_for(s: str | None) -> Any:
        return as_llm(student, s, max_new_tokens, temperature, "student") if s else first

    asked, dropped = _fresh_prompts(rows, dedupe=True)
    todo = [rows[i] for i in asked]
    if teacher is None:
        samples = ask_rows(student_for, todo, n=n_samples, phase="student", progress=progress)
        table, more = _judged_pairs(judge, todo, samples, min_gap, rubric, progress)
        mode, teacher_f = "judge", None
    else:
        teacher_f = as_llm(teacher, None, max_new_tokens, temperature)
        chosen = ask_rows(
            lambda s: as_llm(teacher, s, max_new_tokens, temperature) if s else teacher_f,
            todo, phase="teacher", progress=progress,
        )  # fmt: skip
        rejected = ask_rows(student_for, todo, phase="student", progress=progress)
        table, more = _taught_pairs(judge, todo, chosen, rejected, min_gap, rubric, progress)
        samples, mode = rejected, "teacher"
    dropped |= {asked[k]: reason for k, reason in more.items()}
    record = _record("synthesize_pairs", PAIR_REASONS, rows, dropped)
    record |= {
        "mode": mode,
        "student": _describe(first),
        "teacher": _describe(teacher_f) if teacher_f is not None else None,
        "judge": _judge_description(judge),
        "samples": _sample_counts(samples),
        "usage": {"student": _usage(first), "teacher": _usage(teacher_f)},
        "settings": {
            "system": system, "n_samples": n_samples if teacher is None else 1,
            "min_gap": min_gap if judge is not None else None, "rubric": rubric,
            "temperature": temperature, "max_new_tokens": max_new_tokens,
        },
    }  # fmt: skip
    for row in table:
        k = row.pop("_row")
        if todo[k].system:
            row["system"] = todo[k].system
    like = prompts if isinstance(prompts, Dataset) else None
    return _write(path, table, record, name, pairs=True, like=like)


def _sample_counts(samples: list[list[Reply]]) -> dict[str, int]:
    counts = {"asked": 0, "ok": 0, "refusal": 0, "empty": 0, "error": 0}
    for reply in (r for group in samples for r in group):
        counts["asked"] += 1
        counts[_reply_reason(reply) or "ok"] += 1
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
        ok = [r.text.strip() for r in group if _reply_reason(r) is None]
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
        if _reply_reason(good):
            dropped[k] = "teacher_failed"
        elif _reply_reason(bad):
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


# -- as a background job (the app) ----------------------------------------------------------

JOB_KINDS = ("synthesize", "synthesize_pairs")
RESULT_FILE = "result.json"  # in the job folder: the file written, or why nothing was
ROLES = {"synthesize": ("teacher", "judge"), "synthesize_pairs": ("student", "judge", "teacher")}


def start_synthesis(
    function: str,
    prompts: Any,
    models: dict[str, Any],
    settings: dict[str, Any],
    runs_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Start `synthesize` or `synthesize_pairs` as a job (`llm_jobs`) in <runs_dir>/jobs/;
    returns the `LLMJob` at once. models: "teacher", "student", "judge" -> an LLM (its key goes
    to the job on stdin, never into a file) or a model id / run folder (answered locally, the
    job then waits its turn for the device). settings: the function's other arguments."""
    from dragonfarm_core import llm_jobs
    from dragonfarm_core.rundir import queue

    if function not in JOB_KINDS:
        raise ValueError(f"function = {function!r}; use one of {', '.join(JOB_KINDS)}.")
    settings = dict(settings)
    check_settings(function, **settings)
    rows = prompt_rows(prompts, settings.get("system"))
    if not rows:
        raise ValueError("No prompts to answer: map the data or pick a run with rows.")
    described: dict[str, Any] = {}
    keys: dict[str, str | None] = {}
    local = False
    for role in ROLES[function]:
        model = models.get(role)
        if model is None:
            continue
        if isinstance(model, LLM) and model.provider != "local":
            described[role] = model.describe()
            llm_jobs.llm_from_description(described[role])  # refuse what the job cannot rebuild
            keys[role] = llm_jobs.api_key_of(model)
        elif isinstance(model, LLM | str | os.PathLike):
            local = True
            described[role] = {"provider": "local", "model": str(getattr(model, "x", model))}
        else:
            raise TypeError(f"{role} must be an LLM, a model id or a run folder for a job.")
    home = location.runs_dir(runs_dir)
    spec = {
        "function": function,
        "prompts": [vars(r) for r in rows],
        "models": described,
        "args": {**settings, "runs_dir": str(home)},
    }
    device = queue.resolve_device("auto") if local else None
    return llm_jobs.start(function, spec, runs_dir=home, keys=keys, device=device)


def job_work(spec: dict[str, Any], context: Any) -> None:
    """The job's side (`llm_jobs.KINDS`): rebuild the models, run, write RESULT_FILE."""
    function = spec["function"]
    models = {}
    for role, description in (spec.get("models") or {}).items():
        local = description.get("provider") == "local"
        models[role] = description["model"] if local else context.llm(description, key=role)
    rows = [PromptRow(**r) for r in spec["prompts"]]
    run: Callable[..., SynthesizedDataset] = (
        synthesize if function == "synthesize" else synthesize_pairs
    )
    first = ROLES[function][0]
    record: dict[str, Any]
    try:
        ds = run(
            rows,
            models.pop(first),
            **models,
            **spec.get("args", {}),
            progress=lambda stage, done, total: context.progress(done, total, stage),
        )
        record = dict(ds.synthesis or {})
        result = {"file": ds.source, "synthesis": record}
    except SynthesisError as e:
        record = e.synthesis
        result = {"file": None, "error": str(e), "synthesis": record}
    finally:
        from dragonfarm_core.inference import worker_stop

        worker_stop()  # a local teacher's worker goes with the job
    files.write_json(Path(context.job_dir) / RESULT_FILE, result)
    print(f"[dragonfarm] {function}: kept {record['kept']} of {record['in']}", flush=True)


def job_result(job: Any) -> SynthesizedDataset:
    """What a finished synthesis job made, read back (`LLMJob.result()`); SynthesisError, with
    the record, when nothing was kept."""
    result = files.read_json(Path(job.job.dir) / RESULT_FILE)
    if not isinstance(result, dict):
        raise RuntimeError(f"The synthesis job wrote no {RESULT_FILE}; see its log.")
    if not result.get("file"):
        raise SynthesisError(str(result.get("error") or "Nothing was kept."), result["synthesis"])
    return open_synthesized(result["file"])
