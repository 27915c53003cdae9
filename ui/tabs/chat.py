"""The Chat tab: talk to a finished run, its base model, or both side by side, and rate replies.

Each browser session keeps its conversations (`dragon.chat` objects) in a `gr.State`. Replies
stream in: `stream` runs `Chat.say` in a thread and yields the text as pieces arrive. 👍, 👎,
Edit and Regenerate act on the latest reply (what `Chat.rate`, `edit` and `regenerate` do);
ratings and edits are saved as feedback events, which the Feedback tab turns into training
data. The run, mode and backend are fixed for a conversation (Reset to change them); the
system prompt and sampling settings apply to the next turn. The code panel lists the calls made.
What a conversation is with, opening it and its code panel are `ui.chat_session`'s; this module
holds the widgets and the handlers. The run picker takes any text; Send resolves it in the app's
runs dir (`refs.resolve_run`), so a run (or any folder) outside it is refused, never loaded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.rundir import files, refs
from ui import named, present, watch
from ui.chat_session import (
    CODE_HINT,
    NAMES,
    OLLAMA_URL,
    Session,
    chat_code,
    prepare,
    reach_refusal,
    read_setup,
    stream,
    turns,
)
from ui.context import AppContext

TITLE = "Chat"
TICK_S = 2.0
NO_RUN = "(no run: the model chosen in the Model tab)"
MODES = [("The run", "run"), ("Its base model", "base"), ("Both, side by side", "both")]
BACKENDS = [
    ("Local worker", "local"),
    ("llama.cpp (the run's GGUF)", "llamacpp"),
    ("OpenAI-compatible server", "server"),
    ("Ollama", "ollama"),
]
LLAMACPP_NOTE = (
    "llama.cpp decodes the picked run merged into an f16 GGUF (dragon.export_gguf, made and "
    "checked once inside the run's folder, on the first reply: about a minute) with its own "
    "llama-server: many times faster than the local worker on a CPU, the same greedy replies."
)
ERRORS = (ValueError, TypeError, OSError, RuntimeError)  # RuntimeError covers InferenceError


def view(
    session: Session | None,
    error: str = "",
    notice: str = "",
    message: Any = None,
    live: tuple[int, list[dict[str, str]]] | None = None,
) -> tuple[Any, ...]:
    """-> (chatbot 1, chatbot 2, session, message box, notice, context usage, code, error)."""
    chats = session.chats if session else []
    bots = []
    for i in range(2):
        if i < len(chats):
            shown = live[1] if live and live[0] == i else turns(chats[i])
            bots.append(gr.update(value=shown, label=chats[i].model_name))
        else:
            bots.append(gr.update(value=[]))
    if live:  # a reply is streaming in: only the chatbots change
        return (*bots, session, gr.skip() if message is None else message, *(gr.skip(),) * 4)
    usage = [present.context_usage_markdown(c.model_name, c.context_usage()) for c in chats]
    return (
        *bots,
        session,
        gr.skip() if message is None else message,
        notice,
        "  \n".join(u for u in usage if u),
        chat_code(session),
        present.error_html(error),
    )


def converse(
    session: Session, which: list[int], ask: Callable[..., str], call: str, pending: str | None
) -> Iterator[tuple[Any, ...]]:
    """Stream `ask(chat, on_token)` for each chat in `which`, then record `call` for it.
    `pending` is the user's message (shown at once; back in the box if a turn fails)."""
    cleared = "" if pending else None  # a regenerate leaves a half-typed message alone
    for n, i in enumerate(which):
        chat = session.chats[i]
        before = turns(chat) + ([{"role": "user", "content": pending}] if pending else [])
        if not pending:
            before = before[:-1]  # regenerate: the reply being replaced goes
        try:
            for text in stream(partial(ask, chat)):
                live = before + [{"role": "assistant", "content": text}]
                yield view(session, message=cleared, live=(i, live))
        except ERRORS as e:
            where = f" ({chat.model_name})" if len(session.chats) > 1 else ""
            kept = " The other reply is kept." if n else ""
            # Nothing got the message: it goes back in its box to send again.
            yield view(session, f"No reply{where}: {e}{kept}", message=None if n else pending)
            return
        session.code.append(f"{NAMES[i]}.{call}")
    yield view(session, message=cleared)


def send(
    session: Session | None, text: str, model: dragon.ResolvedModel, run: str | None,
    mode: str, backend: str, url: str, served: str, api_key: str, ollama_model: str,
    ollama_url: str, system: str, max_new_tokens: float | None, temperature: float,
    top_p: float, context_window: float | None, *, runs_dir: Path,
    profile: Profile | None = None,
) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    """Send -> streamed views: the message goes to every conversation shown, in turn. The
    setup widgets' values are `read_setup`'s; a shared `profile` refuses a server or Ollama URL
    inside its machine's network."""
    if not (text or "").strip():
        yield view(session, "Type a message first.")
        return
    try:
        run = str(refs.resolve_run(run, runs_dir)) if run else run  # refuses one outside
        setup = read_setup(
            run, model, mode=mode, backend=backend, url=url, served=served, api_key=api_key,
            ollama_model=ollama_model, ollama_url=ollama_url, system=system,
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
            context_window=context_window,
        )  # fmt: skip
        if refusal := reach_refusal(setup, profile):
            raise ValueError(refusal)
        ready = prepare(session, setup, runs_dir)
    except ERRORS as e:
        yield view(session, str(e))  # the message stays in its box
        return
    ask = lambda chat, on_token: chat.say(text, on_token)  # noqa: E731
    yield from converse(ready, list(range(len(ready.chats))), ask, f"say({literal(text)})", text)


def regenerate(session: Session | None, which: int) -> Iterator[tuple[Any, ...]]:
    """Ask again for the latest reply of one conversation, replacing it."""
    found = _chat(session, which)
    if isinstance(found, str):
        yield view(session, found)
        return
    live, chat = found
    if not turns(chat):
        yield view(session, "Nothing to regenerate: there is no reply yet.")
        return
    yield from converse(live, [which], lambda c, on: c.regenerate(on), "regenerate()", None)


def _chat(session: Session | None, which: int) -> tuple[Session, dragon.Chat] | str:
    """The session with its conversation `which`, or the message saying there is none."""
    if session is None or which >= len(session.chats):
        return "No conversation yet: send a message first."
    return session, session.chats[which]


def rate(session: Session | None, which: int, verdict: str) -> tuple[Any, ...]:
    """👍 or 👎 on the latest reply, saved as a feedback event."""
    found = _chat(session, which)
    if isinstance(found, str):
        return view(session, found)
    live, chat = found
    try:
        chat.rate(verdict)
    except ERRORS as e:
        return view(session, str(e))
    live.code.append(f'{NAMES[which]}.rate("{verdict}")')
    # Words as well as the emoji: where no emoji font is installed they show as blank boxes.
    mark = "👍 Good" if verdict == "up" else "👎 Bad"
    return view(session, notice=f"{mark} saved for the latest reply of `{chat.model_name}`.")


def add_example(session: Session | None, which: int) -> tuple[Any, ...]:
    """The conversation so far becomes a training example: its latest reply is recorded as
    liked, so `dragon.feedback().sft` holds exactly `chat.as_example()`."""
    found = _chat(session, which)
    if isinstance(found, str):
        return view(session, found)
    live, chat = found
    try:
        example = chat.as_example()
        chat.rate("up")
    except ERRORS as e:
        return view(session, str(e))
    live.code.append(
        f'{NAMES[which]}.rate("up")  # {NAMES[which]}.as_example() becomes a row of '
        "dragon.feedback().sft"
    )
    n = len(example["messages"])
    return view(
        session,
        notice=f"Added the conversation ({n} messages) as a training example: "
        "**Build SFT dataset** in the Feedback tab trains on it.",
    )


def start_edit(session: Session | None, which: int) -> tuple[Any, Any, Any]:
    """Edit -> (edit box with the latest reply, Save edit button, error box)."""
    found = _chat(session, which)
    if isinstance(found, str) or not turns(found[1]):
        message = found if isinstance(found, str) else "Nothing to edit: there is no reply yet."
        return gr.skip(), gr.skip(), present.error_html(message)
    reply = turns(found[1])[-1]["content"]
    return gr.update(value=reply, visible=True), gr.update(visible=True), ""


def save_edit(session: Session | None, text: str, which: int) -> tuple[Any, ...]:
    """Save edit -> the view, then (edit box, Save edit button) hidden on success."""
    found = _chat(session, which)
    if isinstance(found, str):
        return (*view(session, found), gr.skip(), gr.skip())
    live, chat = found
    try:
        chat.edit(text)
    except ERRORS as e:
        return (*view(session, str(e)), gr.skip(), gr.skip())  # the edited text stays
    live.code.append(f"{NAMES[which]}.edit({literal(text)})")
    shown = view(session, notice=f"Edit saved for `{chat.model_name}`.")
    return (*shown, gr.update(visible=False), gr.update(visible=False))


def undo(session: Session | None) -> tuple[Any, ...]:
    """Drop the last exchange of every conversation that has one."""
    done = [i for i, c in enumerate(session.chats) if turns(c)] if session else []
    if session is None or not done:
        return view(session, "Nothing to undo: the conversation has no turns.")
    for i in done:
        session.chats[i].undo()
        session.code.append(f"{NAMES[i]}.undo()")
    return view(session)


def reset(session: Session | None) -> tuple[Any, ...]:
    """Forget every turn; the next message may go to another run, mode or backend."""
    if session is not None:
        for i, chat in enumerate(session.chats):
            chat.reset()
            session.code.append(f"{NAMES[i]}.reset()")
    return view(session)


def save_transcript(session: Session | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """-> (the view, the transcript files to download). Kept in the runs folder's chats/ (the
    user's own folder: on a lab, theirs); the page downloads a copy from the app's own cache
    (GRADIO_TEMP_DIR, removed when the app stops), as the app never serves the runs folder."""
    if session is None or not any(turns(c) for c in session.chats):
        return (*view(session, "Nothing to save yet: send a message first."), gr.skip())
    kept = runs_dir / files.CHATS_DIR
    cache = os.environ.get("GRADIO_TEMP_DIR")  # ui.layout sets it, for the app's lifetime
    download = Path(tempfile.mkdtemp(prefix="dragonfarm-chat-", dir=cache))
    # Random letters after the time: two saves in one second keep both transcripts.
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    paths = []
    for i, chat in enumerate(session.chats):
        name = f"chat-{stamp}{'-base' if chat.base and len(session.chats) > 1 else ''}.json"
        paths.append(str(shutil.copy(chat.save(kept / name), download / name)))
        session.code.append(f"{NAMES[i]}.save({literal(name)})")
    return (*view(session), gr.update(value=paths, visible=True))


def run_choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Succeeded runs, newest first, after the no-run choice."""
    table = dragon.runs(runs_dir)
    done = table[table["state"] == "succeeded"]
    return [
        (NO_RUN, ""),
        *((f"{r.id} ({r.name})", str(runs_dir / r.id)) for r in done.itertuples()),
    ]


def refresh_runs(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    """Timer tick -> (picker update, version seen). While nothing is picked (None), the newest
    run is; a pick (the no-run choice included) stays while it is listed."""
    return watch.refresh_picker(
        runs_dir, seen, current, run_choices, lambda v: v[1] if len(v) > 1 else None
    )


def follow(runs_dir: Path, selected: str | None) -> Any:
    """A run selected in another tab is picked here when it has finished."""
    choices = run_choices(runs_dir)
    if selected not in [v for _, v in choices[1:]]:
        return gr.skip()
    return gr.update(choices=choices, value=selected)


@dataclass(frozen=True)
class Column:
    """One conversation's widgets: its chatbot, the buttons under it and the edit box."""

    column: gr.Column
    bot: gr.Chatbot
    up: gr.Button
    down: gr.Button
    again: gr.Button
    edit: gr.Button
    example: gr.Button
    box: gr.Textbox
    save: gr.Button


# What an empty chat says (a blank 420 px box said nothing): column 0, then the base model's.
EMPTY_CHAT = (
    "Type a message below and press Send: the model picked in Talk to answers here. Rate a"
    " reply with Good or Bad, or Edit it: the Feedback tab turns them into training data.",
    "The base model answers the same message here, beside the run.",
)


def _column(i: int) -> Column:
    with gr.Column(visible=i == 0) as column:
        bot = gr.Chatbot(
            label="Chat" if i == 0 else "Base model",
            height=420,
            placeholder=EMPTY_CHAT[i],
            elem_id=f"chat-bot-{i}",
        )
        with gr.Row():
            up = gr.Button("👍 Good", size="sm", min_width=80, elem_id=f"chat-up-{i}")
            down = gr.Button("👎 Bad", size="sm", min_width=80, elem_id=f"chat-down-{i}")
            again = gr.Button("Regenerate", size="sm", elem_id=f"chat-regenerate-{i}")
            edit = gr.Button("Edit", size="sm", elem_id=f"chat-edit-{i}")
            example = gr.Button("Add as training example", size="sm", elem_id=f"chat-example-{i}")
        box = gr.Textbox(
            label="Edit the latest reply", lines=3, visible=False, elem_id=f"chat-edit-box-{i}"
        )
        save = gr.Button("Save edit", size="sm", visible=False, elem_id=f"chat-edit-save-{i}")
    return Column(column, bot, up, down, again, edit, example, box, save)


def build(ctx: AppContext) -> None:
    with gr.Row():
        picker = gr.Dropdown(
            [(NO_RUN, "")], value=None, label="Talk to", scale=3, elem_id="chat-run",
            allow_custom_value=True,  # choices follow the runs folder; Send checks the run
            info="A finished run (the newest, until you pick one), or the Model tab's model.",
        )  # fmt: skip
        mode = gr.Radio(MODES, value="run", label="Answer with", scale=2, elem_id="chat-mode")
    with gr.Accordion("System prompt and sampling", open=False):
        system = gr.Textbox(label="System prompt", lines=2, elem_id="chat-system")
        with gr.Row():
            max_new = gr.Number(256, precision=0, label="Max new tokens", elem_id="chat-max-new")
            temperature = gr.Slider(0, 2, 0.7, step=0.05, label="Temperature (0: greedy)")
            top_p = gr.Slider(0.05, 1, 0.9, step=0.05, label="Top-p")
            window = gr.Number(
                0, precision=0, label="Context window (tokens; 0: none)", elem_id="chat-window",
                info="Oldest turns are left out of what is sent so the prompt fits.",
            )  # fmt: skip
    with gr.Accordion("Backend", open=False):
        backend = gr.Radio(BACKENDS, value="local", label="Backend", elem_id="chat-backend")
        llamacpp_note = gr.Markdown(LLAMACPP_NOTE, visible=False, elem_id="chat-llamacpp-note")
        with gr.Row(visible=False) as server_box:
            url = gr.Textbox(label="Server URL", placeholder="http://localhost:8000/v1")
            served = gr.Textbox(label="Model", placeholder="the name the server serves")
            key = gr.Textbox(label="API key (kept in memory only)", type="password")
        with gr.Row(visible=False) as ollama_box:
            ollama_model = gr.Textbox(label="Ollama model", placeholder="llama3.2")
            ollama_url = gr.Textbox(OLLAMA_URL, label="Ollama URL")
    with gr.Row():
        columns = [_column(0), _column(1)]
    with gr.Row():
        message = gr.Textbox(
            label="Message", placeholder="Ask something…", scale=5, elem_id="chat-message"
        )
        go = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
    with gr.Row():
        back = gr.Button("Undo", size="sm", elem_id="chat-undo")
        clear = gr.Button("Reset", size="sm", elem_id="chat-reset")
        keep = gr.Button("Save transcript", size="sm", elem_id="chat-save")
    notice = gr.Markdown(elem_id="chat-notice")
    usage = gr.Markdown(elem_id="chat-usage")
    error = gr.HTML(elem_id="chat-error")
    transcript = gr.File(label="Transcript", file_count="multiple", visible=False)
    code = gr.Code(
        CODE_HINT, language="python", label="Python", interactive=False,
        show_line_numbers=False, elem_id="chat-code",
    )  # fmt: skip
    session, seen = gr.State(None), gr.State(None)

    shown = [columns[0].bot, columns[1].bot, session, message, notice, usage, code, error]
    form = {"session": session, "text": message, "model": ctx.model, "run": picker,
            "mode": mode, "backend": backend, "url": url, "served": served, "api_key": key,
            "ollama_model": ollama_model, "ollama_url": ollama_url, "system": system,
            "max_new_tokens": max_new, "temperature": temperature, "top_p": top_p,
            "context_window": window}  # fmt: skip
    talk = named.handler(partial(send, runs_dir=ctx.runs_dir, profile=ctx.profile), form)
    go.click(talk, named.inputs(form), shown)
    message.submit(talk, named.inputs(form), shown)
    back.click(undo, session, shown)
    clear.click(reset, session, shown)
    keep.click(partial(save_transcript, runs_dir=ctx.runs_dir), session, [*shown, transcript])
    for i, col in enumerate(columns):
        col.up.click(partial(rate, which=i, verdict="up"), session, shown)
        col.down.click(partial(rate, which=i, verdict="down"), session, shown)
        col.again.click(partial(regenerate, which=i), session, shown)
        col.example.click(partial(add_example, which=i), session, shown)
        col.edit.click(partial(start_edit, which=i), session, [col.box, col.save, error])
        col.save.click(partial(save_edit, which=i), [session, col.box], [*shown, col.box, col.save])
    mode.change(lambda m: gr.update(visible=m == "both"), mode, columns[1].column)
    backend.change(
        lambda b: tuple(gr.update(visible=b == name) for name in ("server", "ollama", "llamacpp")),
        backend,
        [server_box, ollama_box, llamacpp_note],
    )
    timer = gr.Timer(TICK_S)
    timer.tick(
        partial(refresh_runs, ctx.runs_dir), [seen, picker], [picker, seen], show_progress="hidden"
    )
    ctx.run.change(partial(follow, ctx.runs_dir), ctx.run, picker)
