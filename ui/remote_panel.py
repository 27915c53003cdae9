"""Run elsewhere: the Train tab's bundle-instead-of-train controls, and the Import controls
the Runs and Monitor tabs show for a bundled run.

"Run elsewhere" reads the same widgets as Start (the Train tab's `read_spec`), bundles the run
with `dragon.bundle` (nothing trains here), and shows the provider's steps with a link and the
zip and notebook to download. The downloads are copies in a temporary folder: the app never
serves the runs folder itself. Import takes an uploaded results zip and passes it to
`dragon.import_results`, which refuses anything unexpected in it; the refusal is shown as is.
Every action names the runs dir, so a run outside it is refused (`refs.resolve_run`).
"""

from __future__ import annotations

import html
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.bundle import bundle_arguments, bundle_code, import_code
from dragonfarm_core.rundir import refs
from ui import named, present
from ui.context import AppContext

# "Colab: free tier (T4 GPU), paid tiers": the cost in parentheses nested its own and, with the
# picker a quarter of the row, was cut at "(free tier (T4 GPU".
PROVIDERS = [(f"{r.name}: {r.cost}", r.provider) for r in dragon.remote_providers().itertuples()]
ERRORS = (ValueError, TypeError, OSError, RuntimeError)


def elsewhere_controls() -> tuple[Any, Any]:
    """(provider picker, Run elsewhere button), to sit next to Start."""
    provider = gr.Dropdown(PROVIDERS, value="colab", label="GPU provider", scale=2,
                           elem_id="train-provider")  # fmt: skip
    button = gr.Button("Run elsewhere", scale=1, elem_id="train-elsewhere")
    return provider, button


def steps_markdown(run: dragon.Run, info: dict[str, Any]) -> str:
    """The provider's steps, numbered, with its link, for a run just bundled."""
    lines = [f"Bundled run **`{run.id}`** to train on [{info['provider']}]({info['url']}) "
             "(it opens in a new tab). Download the zip and the notebook below, then:", ""]  # fmt: skip
    lines += [f"{n}. {html.escape(step)}" for n, step in enumerate(info["steps"], 1)]
    return "\n".join(lines)


def _downloads(info: dict[str, Any]) -> list[str]:
    """Copies of the zip and the notebook outside the runs folder, for Gradio to serve."""
    folder = tempfile.mkdtemp(prefix="dragonfarm-bundle-")
    return [str(shutil.copy(info[key], folder)) for key in ("bundle", "notebook")]


def run_elsewhere(
    read_spec: Callable[..., dragon.RunSpec], provider: str, *, runs_dir: Path, **values: Any
) -> tuple[Any, ...]:
    """Run elsewhere -> (selected run, steps, downloads, code, error box). `read_spec` turns
    Start's input values, by name, into the RunSpec Start would start."""
    try:
        spec = read_spec(**values, runs_dir=runs_dir)
        run = dragon.bundle(spec.dataset, spec.model, runs_dir=runs_dir, **bundle_arguments(spec))
        info = dragon.remote(run, provider, open=False)
        files = _downloads(info)
    except ERRORS as e:
        gr.Warning(html.escape(str(e)))
        return gr.skip(), gr.skip(), gr.skip(), gr.skip(), present.error_html(str(e))
    code = present.portable_code(bundle_code(spec, runs_dir, provider))
    shown = gr.update(value=files, visible=True)
    return str(run.dir), steps_markdown(run, info), shown, code, ""


def elsewhere_outputs() -> tuple[Any, Any, Any]:
    """(steps, downloads, error box), shown under the controls once a run is bundled."""
    steps = gr.Markdown(elem_id="train-elsewhere-steps")
    downloads = gr.File(label="Bundle and notebook", file_count="multiple", visible=False,
                        interactive=False, elem_id="train-bundle-files")  # fmt: skip
    return steps, downloads, gr.HTML(elem_id="train-elsewhere-error")


def wire_elsewhere(ctx: AppContext, controls: tuple[Any, Any], outputs: tuple[Any, Any, Any],
                   form: named.Form, code: Any,
                   read_spec: Callable[..., dragon.RunSpec]) -> None:  # fmt: skip
    """The click bundles from Start's widgets (`form`, read by name) and fills the outputs and
    the code panel."""
    (provider, button), (steps, downloads, error) = controls, outputs
    form = {"provider": provider, **form}
    button.click(
        named.handler(partial(run_elsewhere, read_spec, runs_dir=ctx.runs_dir), form),
        named.inputs(form),
        [ctx.run, steps, downloads, code, error],
    )


def import_results(run_ref: str | None, upload: Any, *, runs_dir: Path) -> tuple[Any, ...]:
    """An uploaded results zip -> (message, code, upload cleared). Refusals are shown as is."""
    if not run_ref:
        return present.error_html("Pick a bundled run first."), gr.skip(), None
    if not upload:
        return gr.skip(), gr.skip(), gr.skip()
    path = Path(upload if isinstance(upload, str) else upload.name)
    try:
        run_dir = refs.resolve_run(run_ref, runs_dir)
        run = dragon.import_results(run_dir, path)
    except ERRORS as e:  # ResultsRefused is a ValueError
        gr.Warning(html.escape(str(e)))
        return present.error_html(f"Import refused: {e}"), gr.skip(), None
    state = run.status()["state"]
    message = f"Imported the results of {run.id}: it is {state}; chat with it or evaluate it."
    return present.hint_html(message), import_code(run.dir, path.name), None


def import_controls(ctx: AppContext, run_ref: Any, prefix: str) -> tuple[Any, Any]:
    """(Import button, its message): upload the results zip of the run `run_ref` names."""
    with gr.Row():
        upload = gr.UploadButton("Import results zip", file_types=[".zip"], size="sm",
                                 elem_id=f"{prefix}-import")  # fmt: skip
        message = gr.HTML(elem_id=f"{prefix}-import-message")
    return upload, message


def wire_import(ctx: AppContext, controls: tuple[Any, Any], run_ref: Any, code: Any) -> None:
    """An upload imports into the run `run_ref` names; the code panel shows the call."""
    upload, message = controls
    upload.upload(partial(import_results, runs_dir=ctx.runs_dir), [run_ref, upload],
                  [message, code, upload])  # fmt: skip
