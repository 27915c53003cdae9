"""The Runs tab: every run as a table; open one in the Monitor, archive, unarchive or delete it,
or draw its lineage (`ui.lineage_panel`).

Archive and delete go through `dragon.archive_run` / `dragon.delete_run`, which refuse a run
that is queued or running, or that another run continues from; the refusal is shown as is. The
pickers take any text (their choices follow the runs folder), so every action names the runs dir:
the API then refuses a run outside it (`refs.resolve_run`), and nothing outside is touched.
For the continues-from case the tab offers force (the other runs then lose their starting
point). Delete needs a tick in "I understand" first: it removes the files for good. The tables
follow the runs folder through `ui.watch`, so runs started elsewhere appear by themselves.
"""

from __future__ import annotations

import html
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.rundir import files, refs, store
from ui import lineage_panel, per_user, present, remote_panel, table_widths, watch
from ui.context import AppContext

TITLE = "Runs"
REFRESH_S = 2.0
ACTION_ERRORS = (FileNotFoundError, FileExistsError, RuntimeError, ValueError)


def _picker(ids: list[str], current: str | None) -> Any:
    return gr.update(choices=ids, value=current if current in ids else None)


def tables(runs_dir: Path, chosen: str | None, archived: str | None) -> tuple[Any, ...]:
    """-> (runs table, run picker, archived table, archived picker), newest first. A picked
    run stays picked while it is still listed. The tables get widths per column: sized by
    their cells, 'continued from' stood one letter a line and 'trained on' was off-screen."""
    active, gone = dragon.runs(runs_dir), dragon.archived_runs(runs_dir)
    return (
        table_widths.fitted(present.runs_table(active)),
        _picker(list(active["id"]), chosen),
        table_widths.fitted(present.runs_table(gone)),
        _picker(list(gone["id"]), archived),
    )


def refresh(
    runs_dir: Path, seen: int | None, chosen: str | None, archived: str | None
) -> tuple[Any, ...]:
    """Timer tick -> (the four of `tables`, version seen); reads nothing while nothing changed."""
    version = watch.runs_version(runs_dir)
    if version == seen:
        return (gr.skip(),) * 5
    return (*tables(runs_dir, chosen, archived), version)


def pick_row(event: gr.SelectData) -> Any:
    """A click on a table row picks that run (the id is the first column)."""
    row = event.row_value or []
    return str(row[0]) if row else gr.skip()


def _code(function: str, run_id: str, runs_dir: Path, force: bool = False) -> str:
    """The panel's Python for an action, e.g. dragon.archive_run("id", runs_dir=...)."""
    extra = ", force=True" if force else ""
    call = f"dragon.{function}({literal(run_id)}{extra}, runs_dir={literal(str(runs_dir))})"
    return present.python_code(call + "\n")


def _done(message: str, code: str) -> tuple[str, Any, Any, str]:
    """(message, force box hidden and cleared, confirm box cleared, code)."""
    cleared = gr.update(value=False, visible=False)
    return present.hint_html(message), cleared, False, code


def _found(run_id: str, runs_dir: Path, archived: bool = False) -> Path | None:
    """The folder `run_id` names inside the runs dir, or None (a run elsewhere gets no offer)."""
    try:
        return refs.resolve_run(run_id, runs_dir, archived=archived)
    except (FileNotFoundError, ValueError):
        return None


def _refused(error: Exception, run_dir: Path | None) -> tuple[str, Any, Any, Any]:
    """Show the API's refusal; offer force when other runs continue from this one."""
    gr.Warning(html.escape(str(error)))
    offer = run_dir is not None and files.is_run_dir(run_dir) and bool(store.dependents(run_dir))
    force = gr.update(visible=True) if offer else gr.update(value=False, visible=False)
    return present.error_html(str(error)), force, gr.skip(), gr.skip()


def no_force() -> Any:
    return gr.update(value=False, visible=False)


def open_in_monitor(run_id: str | None, runs_dir: Path) -> tuple[Any, str]:
    """Open -> (selected run, message). The Monitor tab follows the selected run."""
    if not run_id:
        return gr.skip(), present.error_html("Pick a run in the table first.")
    try:
        run_dir = refs.resolve_run(run_id, runs_dir)
    except (FileNotFoundError, ValueError) as e:
        return gr.skip(), present.error_html(str(e))
    return str(run_dir), present.hint_html(f"Opened {run_dir.name}: see the Monitor tab.")


def archive(run_id: str | None, force: bool, runs_dir: Path) -> tuple[Any, ...]:
    """Archive -> (message, force box, confirm box, code)."""
    if not run_id:
        return _refused(ValueError("Pick a run in the table first."), None)
    try:
        done = dragon.archive_run(run_id, runs_dir=runs_dir, force=force)
    except ACTION_ERRORS as e:
        return _refused(e, _found(run_id, runs_dir))
    code = _code("archive_run", done, runs_dir, force)
    return _done(f"Archived {done}; it is listed under Archived runs.", code)


def delete(run_id: str | None, confirmed: bool, force: bool, runs_dir: Path) -> tuple[Any, ...]:
    """Delete (only with "I understand" ticked) -> (message, force box, confirm box, code)."""
    if not run_id:
        return _refused(ValueError("Pick a run in the table first."), None)
    if not confirmed:
        message = f"Tick 'I understand' to delete {run_id}: its files are removed for good."
        return present.error_html(message), gr.skip(), gr.skip(), gr.skip()
    try:
        done = dragon.delete_run(run_id, runs_dir=runs_dir, force=force)
    except ACTION_ERRORS as e:
        return _refused(e, _found(run_id, runs_dir, archived=True))
    return _done(f"Deleted {done}.", _code("delete_run", done, runs_dir, force))


def unarchive(run_id: str | None, runs_dir: Path) -> tuple[Any, ...]:
    """Unarchive -> (message, force box, confirm box, code)."""
    if not run_id:
        return _refused(ValueError("Pick an archived run first."), None)
    try:
        done = dragon.unarchive_run(run_id, runs_dir=runs_dir)
    except ACTION_ERRORS as e:
        return _refused(e, None)
    code = _code("unarchive_run", done, runs_dir)
    return _done(f"Unarchived {done}; it is back in the runs table.", code)


def runs_code(runs_dir: Path) -> str:
    return present.python_code(f"print(dragon.runs(runs_dir={literal(str(runs_dir))}))")


def build(ctx: AppContext) -> None:
    table = gr.Dataframe(
        label="Runs (newest first): click a row to pick it",
        interactive=False,
        wrap=True,
        elem_id="runs-table",
    )
    with gr.Row():
        # Choices follow the runs folder; a value no longer listed reaches the API, which
        # names the missing run, and refuses one outside the runs folder.
        chosen = gr.Dropdown(
            [], label="Run", scale=3, allow_custom_value=True, elem_id="runs-chosen"
        )
        opener = gr.Button("Open in Monitor", variant="primary", scale=1, elem_id="runs-open")
        archiver = gr.Button("Archive", scale=1, elem_id="runs-archive")
        deleter = gr.Button("Delete", variant="stop", scale=1, elem_id="runs-delete")
    with gr.Row():
        confirm = gr.Checkbox(
            False,
            label="I understand: Delete removes the run's files for good",
            elem_id="runs-confirm",
        )
        force = gr.Checkbox(
            False,
            label="Force: archive or delete it although other runs continue from it",
            visible=False,
            elem_id="runs-force",
        )
    message = gr.HTML(elem_id="runs-message")
    importing = remote_panel.import_controls(ctx, chosen, "runs")  # a bundled run's results
    with gr.Accordion("Archived runs", open=False):
        archived_table = gr.Dataframe(interactive=False, wrap=True, elem_id="runs-archived")
        with gr.Row():
            archived = gr.Dropdown(
                [],
                label="Archived run",
                scale=3,
                allow_custom_value=True,
                elem_id="runs-archived-id",
            )
            restorer = gr.Button("Unarchive", scale=1, elem_id="runs-unarchive")
    lineage = lineage_panel.build(ctx)
    # lab: an admin sees every user's runs here, read-only (filled when the page loads).
    everyone = gr.Dataframe(label="Every user's runs (admin, read-only)", interactive=False,
                            wrap=True, visible=False, elem_id="runs-all-users")  # fmt: skip
    ctx.on_load(partial(per_user.all_users_runs, ctx.profile), [everyone])
    code = gr.Code(
        runs_code(ctx.runs_dir),
        language="python",
        label="Python",
        interactive=False,
        show_line_numbers=False,
        elem_id="runs-code",
    )
    ctx.on_load(lambda: runs_code(ctx.runs_dir), [code])  # lab: the user's own folder
    seen = gr.State(None)
    timer = gr.Timer(REFRESH_S)

    listing = [table, chosen, archived_table, archived]
    outcome = [message, force, confirm, code]
    reload = partial(tables, ctx.runs_dir)
    pickers = [chosen, archived]
    table.select(pick_row, None, chosen)
    archived_table.select(pick_row, None, archived)
    opener.click(partial(open_in_monitor, runs_dir=ctx.runs_dir), chosen, [ctx.run, message])
    archiver.click(partial(archive, runs_dir=ctx.runs_dir), [chosen, force], outcome).then(
        reload, pickers, listing
    )
    deleter.click(partial(delete, runs_dir=ctx.runs_dir), [chosen, confirm, force], outcome).then(
        reload, pickers, listing
    )
    restorer.click(partial(unarchive, runs_dir=ctx.runs_dir), archived, outcome).then(
        reload, pickers, listing
    )
    remote_panel.wire_import(ctx, importing, chosen, code)
    lineage_panel.wire(ctx, lineage, chosen, archived, code, message)
    # A force offered for one run must not carry over to another.
    chosen.change(no_force, None, force)
    timer.tick(
        partial(refresh, ctx.runs_dir), [seen, *pickers], [*listing, seen], show_progress="hidden"
    )
