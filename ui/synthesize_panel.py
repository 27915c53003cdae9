"""The Data tab's Synthesize section: a teacher answers prompts, and what passes is the data.

Synthesize asks a teacher (Claude, an OpenAI-compatible server, or a local model or run) to
answer the mapped data's prompts or a run's, runs the quality pass and an optional judge gate,
and hands what was kept to the Train tab as the mapped dataset. It runs as a background job,
watched by `ui.synthesis_watch`. A key typed into a password field goes to the job on its
stdin: it is in no code panel, log, file or message.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import synthesis_code
from dragonfarm_core.data.codegen import dataset_code, literal
from dragonfarm_core.rundir import refs
from ui import present
from ui.context import AppContext
from ui.llm_form import llm_form, make_llm, model_code
from ui.synthesis_watch import (
    ERRORS,
    job_widgets,
    prompts_code,
    refused,
    run_prompts,
    runs_dir_expression,
    started,
    wire,
)

SYNTH_HINT = "# Choose the prompts and a teacher; the Python that synthesizes appears here."


def synth_settings(
    system: str | None, min_chars: float | None, max_chars: float | None, alpha: float,
    dedupe: bool, near: float, max_new_tokens: float | None, temperature: float,
    gate: bool, min_score: float, rubric: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The synthesize() arguments the widgets hold (0 characters: no upper limit)."""
    settings: dict[str, Any] = {
        "system": (system or "").strip() or None,
        "min_chars": int(min_chars or 0),
        "max_chars": int(max_chars) if max_chars else None,
        "min_alpha_ratio": float(alpha),
        "dedupe": bool(dedupe),
        "near_dup_threshold": float(near),
        "max_new_tokens": int(max_new_tokens or 512),
        "temperature": float(temperature),
    }
    if gate:
        settings |= {"min_score": float(min_score), "rubric": (rubric or "").strip() or None}
    return settings


def start_synthesis(
    mapped: dragon.Dataset | None, model: dragon.ResolvedModel, source: str, run: str | None,
    split: str, n: float | None, teacher: Mapping[str, Any], judge: Mapping[str, Any],
    settings: Mapping[str, Any], *, runs_dir: Path,
) -> tuple[Any, ...]:  # fmt: skip
    """Synthesize -> the outputs (see `_view`), at once: the job, which the timer watches.
    `teacher` and `judge`: their `llm_form`s' values by name; `settings`: `synth_settings`'
    arguments by name."""
    try:
        chosen = synth_settings(**settings)
        teacher_llm = make_llm(**teacher, role="teacher", runs_dir=runs_dir,
                               max_tokens=chosen["max_new_tokens"],
                               temperature=chosen["temperature"])  # fmt: skip
        judge_llm = (
            make_llm(**judge, role="judge", runs_dir=runs_dir, judge=True)
            if settings["gate"]
            else None
        )
        split_of: tuple[float, int] | None = None
        if source == "run":
            prompts: Any = run_prompts(run, split, n, runs_dir)
            head = [prompts_code(str(refs.resolve_run(str(run), runs_dir)), split, n)]
            first = "prompts"
        else:
            if mapped is None:
                raise ValueError(
                    "No mapped dataset yet: load data in the Data tab and map it in the Mapping "
                    "tab (its prompts are what the teacher answers), or take a run's prompts."
                )
            prompts, first = mapped, "ds"
            head = [dataset_code(mapped.spec(), var="ds")]
            split_of = (mapped.eval_frac, mapped.seed) if mapped.split_set else None
        code = synthesize_code(head, first, teacher_llm, judge_llm, chosen, runs_dir, model.name)
        job = dragon.start_synthesis(
            "synthesize", prompts, {"teacher": teacher_llm, "judge": judge_llm}, chosen, runs_dir
        )
    except ERRORS as e:
        return refused(str(e))
    told = "The Train tab now trains on it (it replaces the mapped dataset)."
    return started(job, code, split_of, told)


def synthesize_code(
    head: list[str],
    first: str,
    teacher: dragon.LLM | str,
    judge: dragon.LLM | str | None,
    settings: dict[str, Any],
    runs_dir: Path,
    model: str,
) -> str:
    """The Python of the same synthesis, then training `model` on it."""
    teacher_expr, notes = model_code(teacher)
    positional = [first, teacher_expr]
    expressions: dict[str, str] = {}
    if judge is not None:
        expressions["judge"], more = model_code(judge, judge=True)
        notes += more
    expressions |= runs_dir_expression(runs_dir)
    body = synthesis_code("synthesize", head, positional, settings, expressions, notes)
    return present.portable_code(body + f"run = dragon.train(synth, {literal(model)})\n")


def build_synthesize(ctx: AppContext) -> None:
    """The Synthesize section (inside the Data tab)."""
    with gr.Accordion("Synthesize: answers from a teacher model", open=False):
        gr.Markdown(
            "A stronger model answers prompts; a quality pass drops replies that are too short "
            "or long, look garbled, or repeat earlier ones, and a judge can keep only the "
            "replies it scores well. What is kept becomes the dataset the Train tab trains on."
        )
        with gr.Row():
            source = gr.Radio([("The mapped data", "data"), ("A run's prompts", "run")],
                              value="data", label="Prompts from", elem_id="synth-source")  # fmt: skip
            run = gr.Dropdown([], value=None, label="Run", allow_custom_value=True,
                              visible=False, elem_id="synth-run")  # fmt: skip
            split = gr.Radio(["train", "eval"], value="train", label="Rows", visible=False,
                             elem_id="synth-split")  # fmt: skip
            n = gr.Number(0, label="How many (0: all)", precision=0, minimum=0, visible=False,
                          elem_id="synth-n")  # fmt: skip
        teacher = llm_form("synth-teacher", "teacher")
        system = gr.Textbox(label="System prompt (the teacher answers with it; the data keeps it)",
                            lines=2, elem_id="synth-system")  # fmt: skip
        with gr.Accordion("Quality settings", open=False):
            with gr.Row():
                min_chars = gr.Number(1, label="Min characters", precision=0, minimum=0,
                                      elem_id="synth-min-chars")  # fmt: skip
                max_chars = gr.Number(0, label="Max characters (0: no limit)", precision=0,
                                      minimum=0, elem_id="synth-max-chars")  # fmt: skip
                alpha = gr.Slider(0, 1, 0, step=0.05, label="Min share of letters",
                                  elem_id="synth-alpha")  # fmt: skip
            with gr.Row():
                dedupe = gr.Checkbox(True, label="Drop repeated prompts and replies",
                                     elem_id="synth-dedupe")  # fmt: skip
                near = gr.Slider(0.5, 1, 0.92, step=0.01, label="Near-duplicate similarity",
                                 elem_id="synth-near")  # fmt: skip
                max_new_tokens = gr.Number(512, label="Max new tokens", precision=0, minimum=1,
                                           elem_id="synth-max-new")  # fmt: skip
                temperature = gr.Slider(0, 2, 0.7, step=0.05, label="Temperature",
                                        elem_id="synth-temperature")  # fmt: skip
        gate = gr.Checkbox(False, label="Judge gate: keep only replies a judge scores well",
                           elem_id="synth-gate")  # fmt: skip
        with gr.Group(visible=False) as gate_box:
            judge = llm_form("synth-judge", "judge", runs_dir=ctx.runs_dir)
            with gr.Row():
                min_score = gr.Slider(1, 10, 7, step=1, label="Min score (1-10)",
                                      elem_id="synth-min-score")  # fmt: skip
                rubric = gr.Textbox(label="Rubric (optional)", elem_id="synth-rubric")
        widgets = job_widgets("synth", "Synthesize", "Kept rows (first 10)", SYNTH_HINT)

    def show_source(choice: str) -> tuple[Any, ...]:
        return tuple(gr.update(visible=choice == "run") for _ in range(3))

    source.change(show_source, source, [run, split, n])
    gate.change(lambda on: gr.update(visible=on), gate, gate_box)
    settings = {"system": system, "min_chars": min_chars, "max_chars": max_chars, "alpha": alpha,
                "dedupe": dedupe, "near": near, "max_new_tokens": max_new_tokens,
                "temperature": temperature, "gate": gate, "min_score": min_score,
                "rubric": rubric}  # fmt: skip
    form = {"mapped": ctx.mapped, "model": ctx.model, "source": source, "run": run,
            "split": split, "n": n, "teacher": teacher.form, "judge": judge.form,
            "settings": settings}  # fmt: skip
    wire(ctx, widgets, run, start_synthesis, form)
