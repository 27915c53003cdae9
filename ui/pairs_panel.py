"""The Feedback tab's pairs from a run's own samples: preference pairs without hand labelling.

"Pairs from a run's samples" samples a finished run several times per prompt, lets a judge rank
the samples, and hands the best-versus-worst pairs to the Train tab (for DPO or ORPO continuing
from that run). It runs as a background job, watched by `ui.synthesis_watch`. A key typed into
a password field goes to the job on its stdin: it is in no code panel, log, file or message.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import synthesis_code
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.rundir import refs
from ui.context import AppContext
from ui.llm_form import llm_form, make_llm, model_code
from ui.synthesis_watch import (
    ERRORS,
    job_widgets,
    refused,
    run_prompts,
    runs_dir_expression,
    started,
    wire,
)

PAIRS_HINT = "# Pick a run and a judge; the Python that builds the pairs appears here."


def start_pairs(
    run: str | None,
    split: str,
    n: float | None,
    n_samples: float | None,
    min_gap: float,
    temperature: float,
    max_new_tokens: float | None,
    rubric: str | None,
    judge: Mapping[str, Any],
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Build pairs -> the outputs (see `_view`), at once: the job, which the timer watches.
    `judge`: the judge `llm_form`'s values by name."""
    try:
        prompts = run_prompts(run, split, n, runs_dir)
        folder = str(refs.resolve_run(str(run), runs_dir))
        judge_llm = make_llm(**judge, role="judge", runs_dir=runs_dir, judge=True)
        settings = {
            "n_samples": int(n_samples or 0),
            "min_gap": float(min_gap),
            "temperature": float(temperature),
            "max_new_tokens": int(max_new_tokens or 256),
            "rubric": (rubric or "").strip() or None,
        }
        code = pairs_code(folder, split, n, judge_llm, settings, runs_dir)
        job = dragon.start_synthesis(
            "synthesize_pairs", prompts, {"student": folder, "judge": judge_llm}, settings,
            runs_dir,
        )  # fmt: skip
    except ERRORS as e:
        return refused(str(e))
    told = (
        "The Train tab now trains on these pairs (they replace the mapped dataset): choose DPO "
        "or ORPO and continue from the same run."
    )
    return started(job, code, None, told)


def pairs_code(
    run: str,
    split: str,
    n: float | None,
    judge: dragon.LLM | str,
    settings: dict[str, Any],
    runs_dir: Path,
) -> str:
    """The Python of the same pairs, then DPO continuing from the run."""
    judge_expr, notes = model_code(judge, judge=True)
    head = [f"student = dragon.open_run({literal(run)})",
            f"prompts = dragon.prompts(student, {literal(split)}"
            + (f", n={int(n)})" if n else ")")]  # fmt: skip
    expressions = {"judge": judge_expr, **runs_dir_expression(runs_dir)}
    body = synthesis_code(
        "synthesize_pairs", head, ["prompts", "student"], settings, expressions, notes
    )
    return body + "dpo = dragon.prefer(pairs, student)\n"


def build_pairs(ctx: AppContext) -> None:
    """The pairs-from-a-run section (inside the Feedback tab)."""
    with gr.Accordion("Preference pairs from a run's own samples, under a judge", open=False):
        gr.Markdown(
            "The run answers each prompt several times; a judge scores every sample, and the "
            "best and worst become a chosen and a rejected reply when their scores are far "
            "enough apart. No hand labelling: the pairs train DPO or ORPO from the same run."
        )
        with gr.Row():
            run = gr.Dropdown([], value=None, label="Run (the student)", allow_custom_value=True,
                              scale=3, elem_id="pairs-run")  # fmt: skip
            split = gr.Radio(["train", "eval"], value="train", label="Its prompts",
                             elem_id="pairs-split")  # fmt: skip
            n = gr.Number(100, label="How many (0: all)", precision=0, minimum=0,
                          elem_id="pairs-n")  # fmt: skip
        with gr.Row():
            n_samples = gr.Number(4, label="Samples per prompt", precision=0, minimum=2,
                                  elem_id="pairs-samples")  # fmt: skip
            min_gap = gr.Slider(0, 9, 2, step=0.5, label="Min score gap", elem_id="pairs-gap")
            temperature = gr.Slider(0, 2, 0.8, step=0.05, label="Temperature",
                                    elem_id="pairs-temperature")  # fmt: skip
            max_new_tokens = gr.Number(256, label="Max new tokens", precision=0, minimum=1,
                                       elem_id="pairs-max-new")  # fmt: skip
        judge = llm_form("pairs-judge", "judge", runs_dir=ctx.runs_dir)
        rubric = gr.Textbox(label="Rubric (optional)", elem_id="pairs-rubric")
        widgets = job_widgets("pairs", "Build pairs", "Pairs (first 10)", PAIRS_HINT)
    form = {"run": run, "split": split, "n": n, "n_samples": n_samples, "min_gap": min_gap,
            "temperature": temperature, "max_new_tokens": max_new_tokens, "rubric": rubric,
            "judge": judge.form}  # fmt: skip
    wire(ctx, widgets, run, start_pairs, form)
