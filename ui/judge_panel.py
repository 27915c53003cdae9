"""The Evaluate tab's Judge section: a finished run judged by a language model, as a job.

Judge is `dragon.start_judge`: rubric mode scores each reply 1-10; pairwise mode compares the
run with its base, another run or a model, each question asked twice with the replies swapped.
The judge is Claude (Anthropic), any OpenAI-compatible server (a URL and a model), or a local
model (a run in the list or a model id). The batch runs as a job (the replies are generated in
it, so this process never loads a model) and the handler returns at once; a `gr.Timer`, active
only while the job runs, shows its progress, and its results when it ends: the summary, a
chart of win / tie / loss (with 95 % Wilson intervals) or of the scores, the judge's position
bias, one row per prompt with both replies, the verdicts and rationales, and the code.
Beside the judge: its last measured agreement with the person's Chat feedback, and "Check
against my feedback" to measure it (`ui.agreement_panel`).

A key typed in the password field goes to the job on its stdin and nowhere else: not into the
code panel (which names the variable to set), the job's files, its log or any other output.
Run and model names from the page are resolved in the app's runs dir (`refs.resolve_run`):
a folder outside it is refused.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen import run as codegen
from dragonfarm_core.rundir import files, refs
from ui import agreement_panel, charts, judge_view, present, watch
from ui.context import AppContext

MODES = ("Rubric (score 1-10)", "Pairwise (against another model)")
KINDS = ("Anthropic", "OpenAI-compatible", "Local model")
DEFAULT_CLAUDE = "claude-opus-5"
BASE = "base"
NO_RUN = "Pick a finished run above, then judge it."
NOT_JUDGED = "This run has not been judged yet: pick a judge and press Judge."
ERRORS = (ValueError, TypeError, OSError, RuntimeError)
TICK_S = 1.0
LOG_LINES = 20
CANCEL_TIMEOUT_S = 10.0
CODE_HINT = "# Judge a run; the Python that does the same appears here."
N_OUTPUTS = 12


@dataclass(frozen=True)
class Judging:
    """The judge job this page is waiting for, the code panel it shows, and its mode."""

    job: dragon.LLMJob
    code: str
    mode: str


def model_ref(text: str | None, runs_dir: Path, what: str = "the local judge") -> str:
    """A run in the runs dir (as its folder) or a model id; a folder outside is refused."""
    text = (text or "").strip()
    if not text:
        raise ValueError(f"Name {what}: a run from the list or a model id.")
    try:
        return str(refs.resolve_run(text, runs_dir))  # refuses a folder outside runs_dir
    except FileNotFoundError:
        pass
    path = Path(text).expanduser()
    if path.is_absolute() or text.startswith((".", "~")) or path.exists():
        raise ValueError(
            f"{text!r} is a folder, not a run in {runs_dir}: name a run from the list or a "
            "model id (a model folder can be judged with from Python)."
        )
    return text


def make_judge(
    kind: str | None, model: str | None, url: str | None, key: str | None, runs_dir: Path
) -> dragon.LLM:
    """The judge the form describes; the key, if typed, is kept in the LLM's memory only."""
    model, url, key = (model or "").strip(), (url or "").strip(), (key or "").strip() or None
    if kind == "Anthropic":
        if not key and not os.environ.get("ANTHROPIC_API_KEY", "").strip():
            raise ValueError(
                "Type an Anthropic API key in the Key field, or start the app with "
                "ANTHROPIC_API_KEY set."
            )
        return dragon.judge_anthropic(model=model or DEFAULT_CLAUDE, api_key=key,
                                      base_url=url or None)  # fmt: skip
    if kind == "OpenAI-compatible":
        if not model:
            raise ValueError("Name the model the server should judge with (see its /v1/models).")
        return dragon.judge_openai(model, url, api_key=key)
    if kind == "Local model":
        return dragon.judge_local(model_ref(model, runs_dir))
    raise ValueError(f"Pick a judge: {', '.join(KINDS)}.")


def against_choices(runs_dir: Path) -> list[str]:
    """What pairwise mode can compare with: the base, then the finished runs."""
    table = dragon.runs(runs_dir)
    done = table[table["state"].isin(("succeeded", "cancelled", "failed"))]
    return [BASE, *[str(r) for r in done["id"]]]


def _view(
    summary: Any = None,
    progress: Any = None,
    results: tuple[Any, Any, Any] | None = None,
    code: Any = None,
    error: str = "",
    log: Any = None,
    judging: Judging | None = None,
) -> tuple[Any, ...]:
    """(summary, progress, table, chart, bias, code, error, log, cancel, go, timer, judging)."""
    keep = gr.skip()
    return (
        keep if summary is None else summary,
        gr.update(visible=False) if progress is None else gr.update(value=progress, visible=True),
        *(results if results is not None else (keep,) * 3),
        keep if code is None else code,
        present.error_html(error),
        gr.update(visible=False) if log is None else gr.update(value=log, visible=True),
        *watch.job_buttons(judging is not None),
        judging,
    )


HIDDEN = (gr.update(visible=False),) * 3


def _refused(message: str) -> tuple[Any, ...]:
    watch.warn(message)
    return _view(error=message)


def _running(judging: Judging, status: dict[str, Any]) -> tuple[Any, ...]:
    state = status.get("state")
    row = judging.job.progress()
    bar = charts.progress_html(state, int((row or {}).get("done") or 0),
                               (row or {}).get("total"), None)  # fmt: skip
    text = judge_view.progress_text(state, row)
    run = judging.job.run
    summary = f"**Judging run `{run.id if run else ''}`**: {html.escape(text)}…"
    log = "\n".join(judging.job.logs(LOG_LINES))
    return _view(summary, bar, HIDDEN, judging.code, log=log, judging=judging)


def _results(result: Any, code: str, earlier: bool = False) -> tuple[Any, ...]:
    summary = result.summary
    pairwise = result.mode == "pairwise"
    results = (
        gr.update(value=judge_view.details_table(result.details, result.mode), visible=True),
        gr.update(value=judge_view.figure(result.mode, summary), visible=True),
        gr.update(value=judge_view.position_bias_markdown(summary), visible=pairwise),
    )
    text = judge_view.summary_markdown(result.run_id, result.mode, summary)
    if earlier:
        text = f"*The run's latest judgement, from its judge.json.*\n\n{text}"
    return _view(text, None, results, code)


def _finished(judging: Judging) -> tuple[Any, ...]:
    try:
        result = judging.job.result()
    except ERRORS as e:
        watch.warn(str(e))
        log = "\n".join(judging.job.logs(LOG_LINES))
        return _view(present.hint_html(str(e).splitlines()[0]), None, HIDDEN, error=str(e),
                     log=log)  # fmt: skip
    if result is None:
        return _view(error="The judge job ended without a judgement; see its log.")
    return _results(result, judging.code)


def show_earlier(
    run_dir: str | None, judging: Judging | None, *, runs_dir: Path
) -> tuple[Any, ...]:
    """A run picked -> its latest judgement (judge.json) with the code that made it, or the
    hint to judge it. While a judge job runs, its view stays."""
    if judging is not None:
        return (gr.skip(),) * N_OUTPUTS
    result = None
    if run_dir:
        try:
            result = dragon.read_judgement(refs.resolve_run(run_dir, runs_dir))
        except ERRORS:  # a run that went away or is not in the runs dir: nothing to show
            result = None
    if result is None:
        return _view(present.hint_html(NOT_JUDGED if run_dir else NO_RUN), None, HIDDEN,
                     CODE_HINT)  # fmt: skip
    settings = result.settings
    code = codegen.judge_code(run_dir or "", result.judge, result.against,
                              int(settings.get("n") or 20), settings.get("rubric"),
                              seed=int(settings.get("seed", 42)))  # fmt: skip
    return _results(result, code, earlier=True)


def start_judging(
    run_dir: str | None,
    mode: str | None,
    against: str | None,
    kind: str | None,
    model: str | None,
    url: str | None,
    key: str | None,
    n: float | None,
    rubric: str | None,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Judge -> the outputs (see `_view`), at once: the job, which the timer then watches."""
    try:
        if not run_dir:
            raise ValueError(NO_RUN)
        run_dir = str(refs.resolve_run(run_dir, runs_dir))  # refuses a run outside runs_dir
        if n is None or int(n) < 1:
            raise ValueError("Prompts is empty; enter how many held-out prompts to judge.")
        pairwise = mode == MODES[1]
        other = None
        if pairwise:
            wanted = (against or "").strip()
            other = (
                BASE
                if wanted.lower() == BASE
                else model_ref(wanted, runs_dir, "the model to compare with")
            )
        judge = make_judge(kind, model, url, key, runs_dir)
        text = (rubric or "").strip() or None
        job = dragon.start_judge(run_dir, judge, against=other, n=int(n), rubric=text)
        code = codegen.judge_code(run_dir, judge.describe(), other, int(n), text)
    except ERRORS as e:
        return _refused(str(e))
    judging = Judging(job, code, "pairwise" if pairwise else "rubric")
    return _running(judging, job.status())


def tick(judging: Judging | None) -> tuple[Any, ...]:
    """Timer tick: the job's progress while it runs, its results once it ends."""
    if judging is None:
        return (gr.skip(),) * N_OUTPUTS
    status = judging.job.status()
    if status.get("state") in files.ACTIVE_STATES:
        return _running(judging, status)
    return _finished(judging)


def cancel(judging: Judging | None) -> tuple[Any, ...]:
    """Cancel: the job stops; judge.json stays what it was."""
    if judging is None:
        return _view()
    judging.job.cancel(timeout=CANCEL_TIMEOUT_S)
    return _finished(judging)


# Per judge: the model box's label, and the model it holds until one is typed. What the box
# shows is what Judge uses: no grey placeholder that looks chosen but is not. A server's models
# are its own: its box starts empty, with an example in its help line.
MODEL_FIELDS = {
    "Anthropic": ("Claude model", DEFAULT_CLAUDE, "Any Claude model id."),
    "OpenAI-compatible": ("Model on the server", "",
                          "A model the server lists at /v1/models, e.g. qwen2.5-7b-instruct."),
    "Local model": ("Run or model id", dragon.BUNDLED_MODEL_ID,
                    "A run from the list, or a Hugging Face model id."),
}  # fmt: skip
DEFAULT_MODELS = {default for _, default, _ in MODEL_FIELDS.values()}


def show_fields(
    mode: str | None, kind: str | None, model: str | None = None
) -> tuple[Any, Any, Any, Any]:
    """(against, url, key, model) shown for the mode and the judge picked. The model box takes
    the judge's default unless a model was typed (another judge's default is not typed)."""
    label, default, info = MODEL_FIELDS.get(kind or "", ("Model", "", ""))
    typed = (model or "").strip()
    return (
        gr.update(visible=mode == MODES[1]),
        gr.update(visible=kind in ("Anthropic", "OpenAI-compatible"),
                  label="Base URL (optional)" if kind == "Anthropic" else "Server URL (…/v1)"),
        gr.update(visible=kind in ("Anthropic", "OpenAI-compatible")),
        gr.update(label=label, info=info,
                  value=default if typed in ("", *DEFAULT_MODELS) else typed),
    )  # fmt: skip


def build(ctx: AppContext, picker: gr.Dropdown) -> None:
    """The Judge section, judging the run `picker` holds."""
    gr.Markdown("### Judge")
    with gr.Row():
        mode = gr.Radio(list(MODES), value=MODES[0], label="Mode", scale=2, elem_id="judge-mode")
        against = gr.Dropdown([BASE], value=BASE, label="Against",
                              info="The run's base model, another run, or a model id.",
                              allow_custom_value=True, visible=False, scale=2,
                              elem_id="judge-against")  # fmt: skip
        n = gr.Number(20, label="Prompts", precision=0, minimum=1, scale=1,
                      info="Held-out prompts, the same ones for runs of the same data.",
                      elem_id="judge-n")  # fmt: skip
    with gr.Row():
        kind = gr.Radio(list(KINDS), value=KINDS[0], label="Judge", scale=2, elem_id="judge-kind")
        model_label, model_value, model_info = MODEL_FIELDS[KINDS[0]]
        model = gr.Textbox(model_value, label=model_label, info=model_info, scale=2,
                           elem_id="judge-model")  # fmt: skip
        url = gr.Textbox(label="Base URL (optional)", scale=2, elem_id="judge-url")
        key = gr.Textbox(label="Key", type="password", scale=2, elem_id="judge-key",
                         info="Kept in memory for this job only; empty: the environment's.")  # fmt: skip
    with gr.Row():
        agreement_last = agreement_panel.line("judge-agreement-last", KINDS[0], model_value,
                                              ctx.runs_dir)  # fmt: skip
        check = gr.Button("Check against my feedback", scale=0, min_width=220,
                          elem_id="judge-check")  # fmt: skip
    agreement_warning = gr.HTML(elem_id="judge-agreement-warning")
    agreement = gr.Markdown(elem_id="judge-agreement")
    disagreements = gr.Dataframe(label="Disagreements", interactive=False, wrap=True,
                                 visible=False, elem_id="judge-disagreements")  # fmt: skip
    rubric = gr.Textbox(label="Rubric (optional)", lines=2, elem_id="judge-rubric",
                        placeholder="Reward replies that give concrete next steps and stay "
                        "under 120 words.")  # fmt: skip
    with gr.Row():
        go = gr.Button("Judge", variant="primary", scale=4, elem_id="judge-go")
        stop = gr.Button("Cancel", interactive=False, scale=1, elem_id="judge-cancel")
    error = gr.HTML(elem_id="judge-error")
    summary = gr.Markdown(present.hint_html(NO_RUN), elem_id="judge-summary")
    progress = gr.HTML(visible=False, elem_id="judge-progress")
    log = gr.Textbox(label=f"Judge job log (last {LOG_LINES} lines)", lines=5, max_lines=5,
                     autoscroll=True, interactive=False, visible=False, elem_id="judge-log")  # fmt: skip
    with gr.Row():
        chart = gr.Plot(label="Verdicts", visible=False, scale=3, elem_id="judge-chart")
        bias = gr.Markdown(visible=False, elem_id="judge-bias")
    table = gr.Dataframe(label="Each prompt: the replies, the verdicts and the rationales",
                         interactive=False, wrap=True, visible=False, elem_id="judge-table")  # fmt: skip
    code = gr.Code(CODE_HINT, language="python", label="Python", interactive=False,
                   show_line_numbers=False, elem_id="judge-code")  # fmt: skip
    judging = gr.State(None)
    timer = gr.Timer(TICK_S, active=False)  # ticks only while a judge job runs

    view = [summary, progress, table, chart, bias, code, error, log, stop, go, timer, judging]
    go.click(
        partial(start_judging, runs_dir=ctx.runs_dir),
        [picker, mode, against, kind, model, url, key, n, rubric],
        view,
    )
    watch.wire_job(timer, stop, judging, view, tick, cancel)
    check.click(
        partial(agreement_panel.check, make_judge=make_judge, runs_dir=ctx.runs_dir),
        [kind, model, url, key, rubric],
        [agreement, agreement_warning, disagreements, code, error, agreement_last],
    )
    agreement_panel.wire_line(agreement_last, kind, model, ctx.runs_dir)
    picker.change(partial(show_earlier, runs_dir=ctx.runs_dir), [picker, judging], view)
    for trigger in (mode, kind):
        trigger.change(show_fields, [mode, kind, model], [against, url, key, model])
    against.focus(lambda: gr.update(choices=against_choices(ctx.runs_dir)), None, against)
