"""The app's layout: one tab per module in `ui/tabs/`, and `launch()` for app.py and the CLI.

Adding a tab is two lines here: import its module and list it in TABS. A tab module has a
`TITLE` and a `build(ctx)` that creates its widgets and wires its events.
"""

from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from dragonfarm_core.runs.files import UPLOADS_DIR
from ui.context import app_runs_dir, get_profile, new_context
from ui.tabs import chat, data, evaluate, feedback, mapping, model, monitor, runs, train

TABS = (data, mapping, model, train, monitor, evaluate, chat, feedback, runs)
THEME = gr.themes.Soft(primary_hue="emerald", neutral_hue="slate")
HEADER = "## dragonfarm\nData in, columns mapped, model picked, trained, tried, improved."


def build_app(runs_dir: str | os.PathLike[str], profile: str = "local") -> gr.Blocks:
    """The app as a `gr.Blocks`, keeping its runs (and uploads) in `runs_dir`."""
    folder = Path(runs_dir).expanduser().resolve()
    (folder / UPLOADS_DIR).mkdir(parents=True, exist_ok=True)
    with gr.Blocks(title="dragonfarm", analytics_enabled=False) as app:
        ctx = new_context(folder, get_profile(profile))
        gr.Markdown(HEADER, elem_id="df-header")
        gr.Markdown(f"Runs are saved in `{folder}`", elem_id="df-runs-dir")
        with gr.Tabs():
            for tab in TABS:
                with gr.Tab(tab.TITLE, id=tab.__name__.rsplit(".", 1)[-1]):
                    tab.build(ctx)
    return app


def launch(
    runs_dir: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int | None = 7860,
    profile: str | None = None,
) -> None:
    """Build the app for the profile and serve it until interrupted."""
    chosen = get_profile(profile)
    folder = app_runs_dir(runs_dir, chosen)
    print(f"dragonfarm: runs are saved in {folder}", flush=True)
    build_app(folder, chosen.name).launch(
        server_name=host or chosen.host,
        server_port=port,
        theme=THEME,
        max_file_size=f"{chosen.max_upload_mb}mb",
        # The runs folder holds configs, adapters and uploads: never serve it, whatever a
        # component returns (blocked_paths wins over every allowed path).
        blocked_paths=[str(folder)],
        run_history=False,  # Gradio 6 would otherwise keep every call in the browser
        enable_monitoring=False,
        mcp_server=False,
        footer_links=["api", "settings"],
        show_error=True,
    )
