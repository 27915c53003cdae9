"""The Data tab: load a file or the example data, see its first rows, its report and the code;
or synthesize data with a teacher model (`ui.synthesize_panel`), which becomes the mapped dataset.

Uploads are copied into `<runs_dir>/uploads/`, so the path in the code panel (and in a run's
config) keeps working after the app restarts and Gradio's temp files are gone. A file that
cannot be read leaves the previous dataset loaded and says what is wrong, naming the file as
the person uploaded it (not its copy), and that the previous dataset was kept; the line
`ui.active_data` shows on each tab names the dataset that is active. Its copy is removed
again, and each upload first removes the copies no run refers to that are a day old
(`upload_disk.sweep`), so uploads do not pile up on the disk.
"""

from __future__ import annotations

import filecmp
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.auth import upload_disk
from dragonfarm_core.data.codegen import dataset_code
from ui import active_data, present, synthesize_panel, table_widths
from ui.context import AppContext, report_tokenizer

TITLE = "Data"
FILE_TYPES = [".csv", ".tsv", ".json", ".jsonl", ".parquet", ".xlsx"]
CODE_HINT = "# Load a file or the example data; the Python that does the same appears here."


def save_upload(upload: str, uploads_dir: Path, max_upload_mb: int) -> Path:
    """Copy an uploaded file into the uploads folder under its own name (suffixed if taken)."""
    src = Path(upload)
    size_mb = src.stat().st_size / 2**20
    if size_mb > max_upload_mb:
        raise dragon.DatasetError(
            f"{src.name} is {size_mb:.0f} MB; this app accepts files up to {max_upload_mb} MB. "
            "Use a smaller file, or load the big one from Python with dragon.dataset()."
        )
    if src.suffix.lower() not in FILE_TYPES:
        raise dragon.DatasetError(
            f"{src.name}: {src.suffix or 'no extension'} is not a supported file type; use "
            f"{', '.join(FILE_TYPES)}."
        )
    uploads_dir.mkdir(parents=True, exist_ok=True)
    upload_disk.sweep(uploads_dir.parent)
    target, n = uploads_dir / src.name, 1
    # The same file uploaded twice reuses its copy; a different file never overwrites one that
    # an earlier run's config may point at.
    while target.exists() and not filecmp.cmp(src, target, shallow=False):
        n += 1
        target = uploads_dir / f"{src.stem}-{n}{src.suffix}"
    if target.exists():
        target.touch()  # uploaded again: the sweep counts its day from now
    else:
        shutil.copyfile(src, target)
    return target


def data_code(ds: dragon.Dataset, model: dragon.ResolvedModel) -> str:
    """The Python that loads this dataset and prints its report."""
    counted_with = model.name if report_tokenizer(model) else None
    return present.python_code(
        dataset_code(ds.spec(), var="ds") + "\n" + present.report_code(counted_with)
    )


def preview_table(ds: dragon.Dataset) -> Any:
    """The first rows, with column widths that keep every column in a 1400 px window."""
    rows = present.table_preview(ds.frame)
    return gr.update(value=rows, column_widths=table_widths.column_widths(rows))


def _loaded(ds: dragon.Dataset, model: dragon.ResolvedModel, upload_box: Any) -> tuple[Any, ...]:
    summary = present.dataset_summary(ds.name, ds.format, len(ds), ds.columns)
    report = ds.report(tokenizer=report_tokenizer(model)).to_markdown()
    return ds, preview_table(ds), summary, report, data_code(ds, model), "", upload_box


def _refused(message: str, current: dragon.Dataset | None) -> tuple[Any, ...]:
    # One message per problem: the box under the upload, no toast as well (toasts stack, and
    # said the same thing twice). Everything else keeps showing the dataset still loaded.
    # The upload box is emptied: the file it showed is not the active one, and the next file
    # can be dropped at once.
    problem = f"{message}\n\n{active_data.kept_note(current)}"
    return (gr.skip(),) * 5 + (present.error_html(problem), None)


def load_upload(
    upload: str | None,
    model: dragon.ResolvedModel,
    current: dragon.Dataset | None,
    uploads_dir: Path,
    max_upload_mb: int,
) -> tuple[Any, ...]:
    """Uploaded file -> (dataset, table, summary, report, code, error box, upload box); a file
    that cannot be read keeps `current` and says so, naming the file as the person uploaded it."""
    if not upload:
        return (gr.skip(),) * 7
    copy: Path | None = None
    try:
        known = {p.name for p in uploads_dir.iterdir()} if uploads_dir.is_dir() else set()
        copy = save_upload(upload, uploads_dir, max_upload_mb)
        return _loaded(dragon.dataset(copy), model, gr.skip())
    except dragon.DatasetError as e:
        names = {} if copy is None else {str(copy.resolve()): Path(upload).name}
        if copy is not None and copy.name not in known:
            copy.unlink(missing_ok=True)  # a copy of a file nobody can use
        return _refused(present.user_file_names(str(e), names), current)


def load_example(model: dragon.ResolvedModel, current: dragon.Dataset | None) -> tuple[Any, ...]:
    """The bundled support tickets -> the same outputs as `load_upload`; the upload box is
    emptied (the file it showed is no longer the active one)."""
    try:
        return _loaded(dragon.dataset(dragon.example_data()), model, None)
    except (dragon.DatasetError, FileNotFoundError) as e:
        return _refused(str(e), current)


def show_report(
    ds: dragon.Dataset | None, mapped: dragon.Dataset | None, model: dragon.ResolvedModel
) -> str:
    """The mapped dataset's report (per mapped field) when there is one, else the raw one."""
    current = mapped if mapped is not None else ds
    if current is None:
        return ""
    try:
        return current.report(tokenizer=report_tokenizer(model)).to_markdown()
    except dragon.DatasetError as e:
        return present.error_html(active_data.user_message(str(e), current))


def build(ctx: AppContext) -> None:
    with gr.Row():
        with gr.Column(scale=2):
            upload = gr.File(
                label=f"Upload a dataset ({', '.join(FILE_TYPES)}; up to "
                f"{ctx.profile.max_upload_mb} MB)",
                file_types=FILE_TYPES,
                elem_id="data-upload",
            )
        with gr.Column(scale=1):
            example = gr.Button("Use the example data", elem_id="data-example")
            gr.Markdown("Support tickets with a subject, body, product and the agent's reply.")
    active_data.build_active(ctx, "data-active")
    error = gr.HTML(elem_id="data-error")
    summary = gr.Markdown(elem_id="data-summary")
    table = gr.Dataframe(
        label="First rows", interactive=False, wrap=True, max_height=420, elem_id="data-table"
    )
    with gr.Accordion("Data report", open=True):
        report = gr.Markdown(elem_id="data-report")
    code = gr.Code(
        CODE_HINT,
        language="python",
        show_line_numbers=False,
        label="Python",
        interactive=False,
        elem_id="data-code",
    )

    outputs = [ctx.dataset, table, summary, report, code, error, upload]
    loader = partial(
        load_upload, uploads_dir=ctx.uploads_dir, max_upload_mb=ctx.profile.max_upload_mb
    )
    upload.upload(loader, inputs=[upload, ctx.model, ctx.dataset], outputs=outputs)
    example.click(load_example, inputs=[ctx.model, ctx.dataset], outputs=outputs)
    # The app opens with the example tickets loaded (and, in the Mapping tab, mapped), so a
    # first visit can go straight to Train; any upload replaces them.
    gr.on(None, partial(load_example, ctx.model.value, None), None, outputs)
    ctx.mapped.change(show_report, inputs=[ctx.dataset, ctx.mapped, ctx.model], outputs=report)
    synthesize_panel.build_synthesize(ctx)  # teacher answers -> the mapped dataset
