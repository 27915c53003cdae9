"""A judge's agreement with the person's Chat feedback, in the app.

In the Evaluate tab's Judge section, "Check against my feedback" is `dragon.judge_agreement`
with the judge the form describes (at most `MAX_CASES` cases, all runs' feedback): the figures,
the warning when agreement is low or measured on too few cases, the disagreements side by side,
and the Python in the section's code panel. It runs in the handler (a judge asked twice per
pair; the result is cached, so asking again is instant). Wherever a judge is chosen
(the Evaluate tab, the synthesis gate, pairs from a run's samples, the Pipelines builder) the
last agreement measured for that judge is shown beside it, read from the saved results
(`dragon.last_agreement`): showing it never asks a judge.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.agreement import agreement_code
from dragonfarm_core.rundir import refs
from ui import agreement_view, present, watch

MAX_CASES = 100
ERRORS = (ValueError, TypeError, OSError, RuntimeError)
# The judge choices of the Evaluate tab (judge_panel.KINDS) and of `llm_form` as providers.
PROVIDERS = {"Anthropic": "anthropic", "OpenAI-compatible": "openai", "Local model": "local",
             "anthropic": "anthropic", "openai": "openai", "local": "local"}  # fmt: skip
DEFAULT_CLAUDE = inspect.signature(dragon.judge_anthropic).parameters["model"].default


def judge_of(kind: str | None, model: str | None, runs_dir: Path) -> dict[str, str] | None:
    """The judge a form's choice names, as `last_agreement` matches it ({"provider", "model"});
    None when the form names no model yet."""
    provider = PROVIDERS.get(kind or "")
    text = (model or "").strip()
    if provider == "anthropic":
        text = text or DEFAULT_CLAUDE
    if provider is None or not text:
        return None
    if provider == "local":
        # A run in the app's runs dir by its folder, as the judge forms resolve it; else a
        # model id as typed.
        with contextlib.suppress(FileNotFoundError, ValueError):
            text = str(refs.resolve_run(text, runs_dir))
    return {"provider": provider, "model": text}


def last_line(kind: str | None, model: str | None, *, runs_dir: Path) -> str:
    """The line beside a judge's choice: its last measured agreement, or the hint to measure."""
    judge = judge_of(kind, model, runs_dir)
    if judge is None:
        return ""
    found = dragon.last_agreement(judge, runs_dir)
    return agreement_view.short_line(found.summary if found else None)


def check(
    kind: str | None, model: str | None, url: str | None, key: str | None,
    rubric: str | None, *, make_judge: Callable[..., dragon.LLM], runs_dir: Path,
) -> tuple[Any, ...]:  # fmt: skip
    """Check against my feedback -> (figures, warning, disagreements, code, error, last line).
    make_judge: the section's own (kind, model, url, key, runs_dir) -> LLM."""
    try:
        judge = make_judge(kind, model, url, key, runs_dir)
        text = (rubric or "").strip() or None
        with warnings.catch_warnings():  # the result carries its warning; the page shows it
            warnings.simplefilter("ignore", UserWarning)
            result = dragon.judge_agreement(judge, runs_dir=runs_dir, n=MAX_CASES, rubric=text)
        code = agreement_code(judge.describe(), runs_dir, rubric=text, n=MAX_CASES)
    except ERRORS as e:
        watch.warn(str(e))
        return (present.hint_html(str(e)), "", gr.update(visible=False), gr.skip(),
                present.error_html(str(e)), gr.skip())  # fmt: skip
    table = agreement_view.disagreements_table(result.cases)
    return (
        agreement_view.summary_markdown(result.summary, result.cached),
        agreement_view.warning_html(result.warning),
        gr.update(value=table, visible=True, label=f"Disagreements ({len(table)})"),
        code,
        "",
        agreement_view.short_line(result.summary),
    )


def line(elem_id: str, kind: str | None, model: str | None, runs_dir: Path) -> gr.Markdown:
    """The Markdown beside a judge's choice that holds its last measured agreement, read when
    the page loads (a measurement made since, in Python or another page, shows)."""

    def last_agreement_line() -> str:
        return last_line(kind, model, runs_dir=runs_dir)

    return gr.Markdown(last_agreement_line, elem_id=elem_id)


def wire_line(shown: gr.Markdown, kind: gr.Radio, model: gr.Textbox,
              runs_dir: Path) -> None:  # fmt: skip
    """Refresh the line when the judge changes: its kind, or the model (which a change of kind
    may set), the last of a burst of keystrokes only."""

    def refresh(k: str | None, m: str | None) -> str:
        return last_line(k, m, runs_dir=runs_dir)

    kind.change(refresh, [kind, model], shown)
    model.change(refresh, [kind, model], shown, trigger_mode="always_last")
