"""Synthesis in the app: the Data tab's Synthesize section and the Feedback tab's pairs section.

Synthesize asks a teacher (Claude, an OpenAI-compatible server, or a local model or run) to
answer the mapped data's prompts or a run's, runs the quality pass and an optional judge gate,
and hands what was kept to the Train tab as the mapped dataset. "Pairs from a run's samples"
samples a finished run several times per prompt, lets a judge rank the samples, and hands the
best-versus-worst pairs to the Train tab (for DPO or ORPO continuing from that run).

Both run as background jobs (`dragon.start_synthesis` through `llm_jobs`): the handler returns
at once and a `gr.Timer`, active only while a job runs, shows its progress, then the counts
kept and dropped per reason, a preview of the kept rows and the code. A key typed into a
password field goes to the job on its stdin: it is in no code panel, log, file or message.
"""

from __future__ import annotations

import html
import inspect
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen import llm_call, synthesis_code
from dragonfarm_core.data.codegen import dataset_code, literal, runs_dir_argument
from dragonfarm_core.rundir import refs
from ui import present, watch
from ui.context import AppContext
from ui.judge_panel import model_ref

TICK_S = 1.0
CANCEL_TIMEOUT_S = 10.0
PREVIEW_N = 10
ACTIVE = ("queued", "running")
KINDS = [
    ("Anthropic (Claude)", "anthropic"),
    ("OpenAI-compatible server", "openai"),
    ("Local model or run", "local"),
]
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_CLAUDE = inspect.signature(dragon.llm_anthropic).parameters["model"].default
ERRORS = (ValueError, TypeError, OSError, RuntimeError, dragon.DatasetError)
SYNTH_HINT = "# Choose the prompts and a teacher; the Python that synthesizes appears here."
PAIRS_HINT = "# Pick a run and a judge; the Python that builds the pairs appears here."


# -- language models from the form -------------------------------------------------------------


@dataclass(frozen=True)
class LLMForm:
    """The widgets that choose a teacher or judge: provider, model, URL and key."""

    kind: gr.Radio
    model: gr.Textbox
    url: gr.Textbox
    key: gr.Textbox

    @property
    def inputs(self) -> list[Any]:
        return [self.kind, self.model, self.url, self.key]


def llm_form(prefix: str, role: str, kind: str = "anthropic") -> LLMForm:
    """Provider choice, model, server URL (OpenAI-compatible only) and a password field."""
    with gr.Row():
        choice = gr.Radio(KINDS, value=kind, label=f"{role.capitalize()}", scale=2,
                          elem_id=f"{prefix}-kind")  # fmt: skip
        model = gr.Textbox(
            DEFAULT_CLAUDE if kind == "anthropic" else "",
            label="Model",
            info="A model name; for a local model: a model id or a run in this app.",
            scale=2,
            elem_id=f"{prefix}-model",
        )
    with gr.Row():
        url = gr.Textbox(
            label="Server URL (ends in /v1)",
            placeholder="http://localhost:8000/v1",
            visible=kind == "openai",
            elem_id=f"{prefix}-url",
        )
        key = gr.Textbox(
            label="API key (kept in memory only; never shown in code, logs or files)",
            type="password",
            info=f"Empty: {ANTHROPIC_KEY_ENV} from the app's environment (Anthropic).",
            visible=kind != "local",
            elem_id=f"{prefix}-key",
        )
    form = LLMForm(choice, model, url, key)
    choice.change(show_fields, choice, [url, key, model])
    return form


def show_fields(kind: str) -> tuple[Any, ...]:
    """The URL only for a server, the key only for an API; Claude's default model filled in."""
    model = gr.update(value=DEFAULT_CLAUDE) if kind == "anthropic" else gr.update(value="")
    return gr.update(visible=kind == "openai"), gr.update(visible=kind != "local"), model


def make_llm(
    kind: str,
    model: str | None,
    url: str | None,
    key: str | None,
    *,
    role: str,
    runs_dir: Path,
    judge: bool = False,
    max_tokens: int = 1024,
    temperature: float | None = None,
) -> dragon.LLM | str:
    """The teacher or judge the form describes: an LLM, or a local model's name (synthesis
    answers it through the inference backend): a run in the app's runs dir or a model id, as
    the Evaluate tab's judge takes it (a folder outside the runs dir is refused)."""
    model, url, key = (model or "").strip(), (url or "").strip(), (key or "").strip() or None
    if kind == "local":
        return model_ref(model, runs_dir, what=f"the local {role}")
    if kind == "anthropic":
        make = dragon.judge_anthropic if judge else dragon.llm_anthropic
        return make(model=model or DEFAULT_CLAUDE, api_key=key, max_tokens=max_tokens,
                    temperature=temperature)  # fmt: skip
    if kind == "openai":
        if not model:
            raise ValueError(f"Name the {role}'s model, as the server lists it at /v1/models.")
        make_openai = dragon.judge_openai if judge else dragon.llm_openai
        return make_openai(model, url, api_key=key, max_tokens=max_tokens, temperature=temperature)
    raise ValueError(
        f"Choose where the {role} runs: Anthropic, an OpenAI-compatible server or local."
    )


def model_code(model: dragon.LLM | str, judge: bool = False) -> tuple[str, list[str]]:
    """(the expression, comment lines) for a model in a code panel: a typed key is never in
    it, only where the code expects one."""
    if isinstance(model, str):
        return literal(model), []
    description = model.describe()
    notes = []
    if description.get("api_key"):  # typed in the app: the code says where to put it
        notes.append(f"# The {model.provider} key typed in the app is not shown: put it in")
        notes.append(
            f"# {ANTHROPIC_KEY_ENV}."
            if model.provider == "anthropic"
            else '# an environment variable and add api_key_env="<its name>" to this call.'
        )
    return llm_call(description, judge), notes


# -- what a result looks like ------------------------------------------------------------------


def counts_markdown(record: dict[str, Any]) -> str:
    """Kept of how many, where it went, and one line per reason rows were dropped."""
    lines = [f"**Kept {record['kept']} of {record['in']} prompts.**"]
    if record.get("file"):
        lines[0] += f" Written to `{record['file']}`."
    dropped = [(k, n) for k, n in record["dropped"].items() if n]
    if dropped:
        reasons = record.get("reasons") or {}
        lines += ["", "| dropped | rows | why |", "|---|---:|---|"]
        lines += [f"| {k.replace('_', ' ')} | {n} | {reasons.get(k, '')} |" for k, n in dropped]
    samples = record.get("samples")
    if samples and samples.get("asked"):
        bad = ", ".join(f"{samples[k]} {k}" for k in ("refusal", "empty", "error") if samples[k])
        lines += ["", f"Samples: {samples['asked']} asked, {samples['ok']} usable"
                  + (f" ({bad})." if bad else ".")]  # fmt: skip
    return "\n".join(lines)


@dataclass(frozen=True)
class Watching:
    """The job this page waits for, the code it shows, and what it does with the result."""

    job: Any
    code: str
    split: tuple[float, int] | None = None  # the mapped data's split, carried over
    told: str = ""


def _view(
    mapped: Any = None,
    counts: Any = None,
    error: str = "",
    preview: Any = None,
    code: Any = None,
    watching: Watching | None = None,
) -> tuple[Any, ...]:
    """(mapped dataset, counts, error, preview, code, start button, cancel button, timer,
    watching); None leaves an output as it is."""
    keep = gr.skip()
    active = watching is not None
    return (
        keep if mapped is None else mapped,
        keep if counts is None else counts,
        present.error_html(error),
        keep if preview is None else preview,
        keep if code is None else code,
        gr.update(interactive=not active),
        gr.update(interactive=active, value="Cancel"),
        gr.Timer(active=active),
        watching,
    )


def _refused(message: str) -> tuple[Any, ...]:
    gr.Warning(html.escape(message.splitlines()[0]))
    return _view(error=message)


def _progress(watching: Watching) -> tuple[Any, ...]:
    state = watching.job.state or "queued"
    row = watching.job.progress()
    step = f": {row['stage']} {row['done']}/{row['total']}" if row else ""
    waiting = "queued, waiting for the device" if state == "queued" else state
    text = f"Synthesis {waiting}{step}…"
    return _view(counts=text, code=watching.code, watching=watching)


def _finished(watching: Watching) -> tuple[Any, ...]:
    try:
        ds = watching.job.result()
    except dragon.SynthesisError as e:
        return _view(counts=counts_markdown(e.synthesis), error=str(e))
    except ERRORS as e:
        return _view(counts="", error=str(e))
    if watching.split is not None:
        ds = ds.split(*watching.split)
    counts = counts_markdown(ds.synthesis or {}) + "\n\n" + watching.told
    return _view(ds, counts, "", present.table_preview(ds.frame, PREVIEW_N), watching.code)


def tick(watching: Watching | None) -> tuple[Any, ...]:
    """Timer tick: the job's progress while it runs, then its result."""
    if watching is None:
        return (gr.skip(),) * 9
    if watching.job.state in ACTIVE:
        return _progress(watching)
    return _finished(watching)


def cancel(watching: Watching | None) -> tuple[Any, ...]:
    """Cancel: the job stops between requests and writes nothing."""
    if watching is None:
        return _view()
    watching.job.cancel(CANCEL_TIMEOUT_S)
    return _view(counts="Cancelled: nothing was written.", code=watching.code)


def _started(job: Any, code: str, split: tuple[float, int] | None, told: str) -> tuple[Any, ...]:
    return _progress(Watching(job, code, split, told))


# -- prompts -----------------------------------------------------------------------------------


def run_choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Succeeded runs, newest first, as (label, run folder)."""
    table = dragon.runs(runs_dir)
    done = table[table["state"] == "succeeded"]
    return [(f"{r.id} ({r.method})", str(runs_dir / r.id)) for r in done.itertuples()]


def refresh_runs(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    return watch.refresh_picker(runs_dir, seen, current, run_choices, lambda values: None)


def run_prompts(run: str | None, split: str, n: float | None, runs_dir: Path) -> list[str]:
    """A run's user turns (all, or `n` chosen with the default seed)."""
    if not run:
        raise ValueError("Pick a run whose prompts to use.")
    folder = refs.resolve_run(run, runs_dir)  # refuses a run outside the app's runs folder
    found = dragon.prompts(folder, split, int(n) if n else None)
    if not found:
        raise ValueError(f"Run {folder.name} has no {split} rows; pick the other split.")
    return found


def prompts_code(run: str, split: str, n: float | None) -> str:
    count = f", n={int(n)}" if n else ""
    return f"prompts = dragon.prompts(dragon.open_run({literal(run)}), {literal(split)}{count})"


# -- the Data tab's Synthesize -----------------------------------------------------------------


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
    mapped: dragon.Dataset | None,
    model: dragon.ResolvedModel,
    source: str,
    run: str | None,
    split: str,
    n: float | None,
    *values: Any,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Synthesize -> the outputs (see `_view`), at once: the job, which the timer watches."""
    t_kind, t_model, t_url, t_key, system, min_chars, max_chars, alpha, dedupe, near = values[:10]
    max_new_tokens, temperature, gate, j_kind, j_model, j_url, j_key, min_score = values[10:18]
    rubric = values[18]
    try:
        settings = synth_settings(system, min_chars, max_chars, alpha, dedupe, near,
                                  max_new_tokens, temperature, gate, min_score, rubric)  # fmt: skip
        teacher = make_llm(t_kind, t_model, t_url, t_key, role="teacher", runs_dir=runs_dir,
                           max_tokens=settings["max_new_tokens"],
                           temperature=settings["temperature"])  # fmt: skip
        judge = (
            make_llm(j_kind, j_model, j_url, j_key, role="judge", runs_dir=runs_dir, judge=True)
            if gate
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
        code = synthesize_code(head, first, teacher, judge, settings, runs_dir, model.name)
        job = dragon.start_synthesis(
            "synthesize", prompts, {"teacher": teacher, "judge": judge}, settings, runs_dir
        )
    except ERRORS as e:
        return _refused(str(e))
    told = "The Train tab now trains on it (it replaces the mapped dataset)."
    return _started(job, code, split_of, told)


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
    home = runs_dir_argument(runs_dir)
    if home:
        expressions["runs_dir"] = home.split("=", 1)[1]
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
            judge = llm_form("synth-judge", "judge")
            with gr.Row():
                min_score = gr.Slider(1, 10, 7, step=1, label="Min score (1-10)",
                                      elem_id="synth-min-score")  # fmt: skip
                rubric = gr.Textbox(label="Rubric (optional)", elem_id="synth-rubric")
        with gr.Row():
            go = gr.Button("Synthesize", variant="primary", scale=4, elem_id="synth-go")
            stop = gr.Button("Cancel", interactive=False, scale=1, elem_id="synth-cancel")
        error = gr.HTML(elem_id="synth-error")
        counts = gr.Markdown(elem_id="synth-counts")
        preview = gr.Dataframe(label="Kept rows (first 10)", interactive=False, wrap=True,
                               elem_id="synth-preview")  # fmt: skip
        code = gr.Code(SYNTH_HINT, language="python", label="Python", interactive=False,
                       show_line_numbers=False, elem_id="synth-code")  # fmt: skip
    watching, seen = gr.State(None), gr.State(None)
    timer = gr.Timer(TICK_S, active=False)

    def show_source(choice: str) -> tuple[Any, ...]:
        return tuple(gr.update(visible=choice == "run") for _ in range(3))

    source.change(show_source, source, [run, split, n])
    gate.change(lambda on: gr.update(visible=on), gate, gate_box)
    run.focus(partial(refresh_runs, ctx.runs_dir), [seen, run], [run, seen])
    view = [ctx.mapped, counts, error, preview, code, go, stop, timer, watching]
    inputs = [ctx.mapped, ctx.model, source, run, split, n, *teacher.inputs, system, min_chars, max_chars,
              alpha, dedupe, near, max_new_tokens, temperature, gate, *judge.inputs, min_score,
              rubric]  # fmt: skip
    go.click(partial(start_synthesis, runs_dir=ctx.runs_dir), inputs, view)
    _watch(timer, stop, watching, view)


def _watch(timer: gr.Timer, stop: gr.Button, watching: gr.State, view: list[Any]) -> None:
    timer.tick(tick, watching, view, show_progress="hidden")
    stop.click(lambda: gr.update(value="Cancelling…", interactive=False), None, stop).then(
        cancel, watching, view
    )


# -- the Feedback tab's pairs from a run's own samples -------------------------------------------


def start_pairs(
    run: str | None,
    split: str,
    n: float | None,
    n_samples: float | None,
    min_gap: float,
    temperature: float,
    max_new_tokens: float | None,
    rubric: str | None,
    j_kind: str,
    j_model: str | None,
    j_url: str | None,
    j_key: str | None,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Build pairs -> the outputs (see `_view`), at once: the job, which the timer watches."""
    try:
        prompts = run_prompts(run, split, n, runs_dir)
        folder = str(refs.resolve_run(str(run), runs_dir))
        judge = make_llm(j_kind, j_model, j_url, j_key, role="judge", runs_dir=runs_dir,
                         judge=True)  # fmt: skip
        settings = {
            "n_samples": int(n_samples or 0),
            "min_gap": float(min_gap),
            "temperature": float(temperature),
            "max_new_tokens": int(max_new_tokens or 256),
            "rubric": (rubric or "").strip() or None,
        }
        code = pairs_code(folder, split, n, judge, settings, runs_dir)
        job = dragon.start_synthesis(
            "synthesize_pairs", prompts, {"student": folder, "judge": judge}, settings, runs_dir
        )
    except ERRORS as e:
        return _refused(str(e))
    told = (
        "The Train tab now trains on these pairs (they replace the mapped dataset): choose DPO "
        "or ORPO and continue from the same run."
    )
    return _started(job, code, None, told)


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
    expressions = {"judge": judge_expr}
    home = runs_dir_argument(runs_dir)
    if home:
        expressions["runs_dir"] = home.split("=", 1)[1]
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
        judge = llm_form("pairs-judge", "judge")
        rubric = gr.Textbox(label="Rubric (optional)", elem_id="pairs-rubric")
        with gr.Row():
            go = gr.Button("Build pairs", variant="primary", scale=4, elem_id="pairs-go")
            stop = gr.Button("Cancel", interactive=False, scale=1, elem_id="pairs-cancel")
        error = gr.HTML(elem_id="pairs-error")
        counts = gr.Markdown(elem_id="pairs-counts")
        preview = gr.Dataframe(label="Pairs (first 10)", interactive=False, wrap=True,
                               elem_id="pairs-preview")  # fmt: skip
        code = gr.Code(PAIRS_HINT, language="python", label="Python", interactive=False,
                       show_line_numbers=False, elem_id="pairs-code")  # fmt: skip
    watching, seen = gr.State(None), gr.State(None)
    timer = gr.Timer(TICK_S, active=False)
    run.focus(partial(refresh_runs, ctx.runs_dir), [seen, run], [run, seen])
    view = [ctx.mapped, counts, error, preview, code, go, stop, timer, watching]
    inputs = [run, split, n, n_samples, min_gap, temperature, max_new_tokens, rubric,
              *judge.inputs]  # fmt: skip
    go.click(partial(start_pairs, runs_dir=ctx.runs_dir), inputs, view)
    _watch(timer, stop, watching, view)
