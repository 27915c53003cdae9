"""A Chat tab session, without Gradio: what a conversation is with, its `dragon.chat` objects,
and the Python that holds the same conversation.

`read_setup` turns the tab's widget values into a `Setup`; `prepare` opens the conversations
(`build_chats`: the run, its base model, or both) or carries a new system prompt and sampling
into live ones. A `Session` records each call made as a line of Python, and `chat_code` turns
those lines into the code panel: `c` is the first conversation, `b` the base model's. The API key
never reaches the code, which reads it from KEY_ENV. `stream` runs a reply in a thread so the tab
can show it as it arrives.
"""

from __future__ import annotations

import inspect
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.auth.url_guard import private_url_refusal
from dragonfarm_core.data.codegen import literal, runs_dir_argument
from ui import present

KEY_ENV = "DRAGONFARM_BACKEND_API_KEY"  # where the code panel reads a key from; never the key
# The address backend_ollama uses when given none: the Chat tab's default, left out of the code.
OLLAMA_URL: str = inspect.signature(dragon.backend_ollama).parameters["url"].default
CODE_HINT = "# Send a message: the Python that holds the same conversation appears here."
NAMES = ("c", "b")  # code-panel variables: the first conversation, and the base model's
BASES = {"run": [False], "base": [True], "both": [False, True]}  # mode -> base= of each chat


@dataclass(frozen=True)
class Setup:
    """What a conversation is with, and how it samples. `api_key` never reaches the code."""

    mode: str  # "run", "base" or "both"
    target: str  # a run directory, or a model name when no run is picked
    backend: str  # "local", "server", "ollama" or "llamacpp"
    url: str
    model: str  # the server's or Ollama's model
    system: str | None
    max_new_tokens: int
    temperature: float
    top_p: float
    context_window: int | None
    api_key: str | None = field(default=None, repr=False)

    def partner(self) -> tuple[Any, ...]:
        return (self.mode, self.target, self.backend, self.url, self.model, self.api_key)


@dataclass
class Session:
    """One browser session's conversations (one, or the run and its base) and the calls made."""

    setup: Setup
    chats: list[dragon.Chat]
    code: list[str]


def _whole(value: Any, label: str) -> int | None:
    if value is None or value == "":
        return None
    if float(value) != int(value):
        raise ValueError(f"{label} must be a whole number of tokens, got {value}.")
    return int(value)


def read_setup(
    run: str | None,
    model: dragon.ResolvedModel,
    mode: str,
    backend: str,
    url: str,
    served: str,
    api_key: str,
    ollama_model: str,
    ollama_url: str,
    system: str,
    max_new_tokens: float | None,
    temperature: float,
    top_p: float,
    context_window: float | None,
) -> Setup:
    """The widgets' values as a Setup; what dragon.chat checks is left to it."""
    if not run and mode != "run":
        raise ValueError("Pick a run to talk to its base model or to compare the two.")
    if backend == "llamacpp" and not run:
        raise ValueError(
            "Pick a run: llama.cpp serves a run's own GGUF, made once inside the run's folder "
            "(the local worker talks to the Model tab's model)."
        )
    if backend == "llamacpp" and mode != "run":
        raise ValueError(
            "llama.cpp serves one GGUF, the run's own: choose 'The run', or the local worker "
            "to talk to its base model or compare the two."
        )
    served_model = {"server": served, "ollama": ollama_model}.get(backend, "")
    return Setup(
        mode=mode,
        target=run or (model.base if model.revision else model.name),
        backend=backend,
        url={"server": url, "ollama": ollama_url}.get(backend, "").strip(),
        model=(served_model or "").strip(),
        system=(system or "").strip() or None,
        max_new_tokens=_whole(max_new_tokens, "Max new tokens") or 0,
        temperature=float(temperature),
        top_p=float(top_p),
        context_window=_whole(context_window, "Context window") or None,  # 0 means none
        api_key=((api_key or "").strip() or None) if backend == "server" else None,
    )


# One llama-server per GGUF served, kept up for the app's life like the local worker: a new
# conversation with the same run reuses it (backend_llamacpp stops them all at exit).
_LLAMACPP: dict[str, dragon.Backend] = {}


def make_backend(setup: Setup) -> dragon.Backend:
    if setup.backend == "server":
        return dragon.backend_server(setup.url, setup.model, api_key=setup.api_key)
    if setup.backend == "ollama":
        return dragon.backend_ollama(setup.model, url=setup.url or OLLAMA_URL)
    if setup.backend == "llamacpp":
        if setup.target not in _LLAMACPP:  # the run's GGUF is exported on its first reply
            _LLAMACPP[setup.target] = dragon.backend_llamacpp(setup.target)
        return _LLAMACPP[setup.target]
    return dragon.backend_local()


def reach_refusal(setup: Setup, profile: Profile | None) -> str | None:
    """Why a shared app (lab, Space) may not send this conversation to its URL: a loopback or
    private address the admin did not allow (dragonfarm_core.auth.url_guard). None when it may."""
    if profile is None or profile.private_backends or setup.backend not in ("server", "ollama"):
        return None
    return private_url_refusal(setup.url or OLLAMA_URL)


def build_chats(setup: Setup, runs_dir: Path) -> list[dragon.Chat]:
    """One `dragon.chat` per conversation shown: the run (or model), its base, or both."""
    backend = make_backend(setup)
    return [
        dragon.chat(
            setup.target,
            system=setup.system,
            backend=backend,
            max_new_tokens=setup.max_new_tokens,
            temperature=setup.temperature,
            top_p=setup.top_p,
            base=base,
            runs_dir=runs_dir,
            context_window=setup.context_window,
        )
        for base in BASES[setup.mode]
    ]


def turns(chat: dragon.Chat) -> list[dict[str, str]]:
    """The messages shown in a chatbot: the history without the system prompt."""
    return [m for m in chat.history() if m["role"] != "system"]


def prepare(session: Session | None, setup: Setup, runs_dir: Path) -> Session:
    """The session to talk in: new conversations when none has turns yet; else the same ones,
    with this system prompt and sampling. A different run, mode or backend needs a Reset."""
    fresh = build_chats(setup, runs_dir)  # dragon.chat checks every setting
    if session is None or not any(turns(c) for c in session.chats):
        return Session(setup, fresh, setup_code(setup, runs_dir))
    if setup.partner() != session.setup.partner():
        now = " and ".join(f"`{c.model_name}`" for c in session.chats)
        raise ValueError(
            f"This conversation is with {now} ({session.setup.backend} backend). Press Reset "
            "to talk with the run, mode or backend now chosen (Save transcript first to keep it)."
        )
    for name, old, new in zip(NAMES, session.chats, fresh, strict=False):
        session.code += settings_code(name, old, new)
        old.system, old.sampling = new.system, new.sampling
        old.context_window = new.context_window
    session.setup = setup
    return session


def stream(call: Callable[[Callable[[str], None]], str]) -> Iterator[str]:
    """Run `call(on_token)` in a thread; yield the text so far as pieces arrive, then the reply.
    An error in the call is raised here."""
    pieces: queue.Queue[str | None] = queue.Queue()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["reply"] = call(pieces.put)
        except BaseException as e:  # handed to the generator, which re-raises it
            outcome["error"] = e
        finally:
            pieces.put(None)

    threading.Thread(target=work, daemon=True).start()
    text = ""
    while (piece := pieces.get()) is not None:
        text += piece
        yield text
    if "error" in outcome:
        raise outcome["error"]
    yield outcome["reply"]


def setup_code(setup: Setup, runs_dir: Path) -> list[str]:
    """The lines that open the same conversations."""
    lines, args = [], [literal(setup.target)]
    if setup.backend == "server":
        key = f", api_key=os.environ[{literal(KEY_ENV)}]" if setup.api_key else ""
        lines.append(
            f"backend = dragon.backend_server({literal(setup.url)}, {literal(setup.model)}{key})"
        )
    elif setup.backend == "ollama":
        url = f", url={literal(setup.url)}" if setup.url and setup.url != OLLAMA_URL else ""
        lines.append(f"backend = dragon.backend_ollama({literal(setup.model)}{url})")
    elif setup.backend == "llamacpp":
        lines.append(f"backend = dragon.backend_llamacpp({literal(setup.target)})")
    args += [f"system={literal(setup.system)}"] if setup.system else []
    args += ["backend=backend"] if setup.backend != "local" else []
    args += _sampling_args(setup)
    args += [f"context_window={setup.context_window}"] if setup.context_window else []
    args += [where] if (where := runs_dir_argument(runs_dir)) else []
    for name, base in zip(NAMES, BASES[setup.mode], strict=False):
        call = [*args[:1], *(["base=True"] if base else []), *args[1:]]
        lines.append(f"{name} = dragon.chat({', '.join(call)})")
    return lines


def _sampling_args(setup: Setup) -> list[str]:
    defaults = {"max_new_tokens": 256, "temperature": 0.7, "top_p": 0.9}
    return [f"{k}={getattr(setup, k)!r}" for k, v in defaults.items() if getattr(setup, k) != v]


def settings_code(name: str, old: dragon.Chat, new: dragon.Chat) -> list[str]:
    """Lines that change a live conversation's system prompt, sampling or context window."""
    lines = []
    if old.system != new.system:
        lines.append(f"{name}.system = {literal(new.system) if new.system else None}")
    if old.sampling != new.sampling:
        values = ", ".join(
            f"{k}={v!r}" for k, v in new.sampling.as_dict().items() if k != "seed" or v is not None
        )  # an unseeded chat (the Chat tab's) writes no seed
        lines.append(f"{name}.sampling = Sampling({values})")
    if old.context_window != new.context_window:
        lines.append(f"{name}.context_window = {new.context_window!r}")
    return lines


def chat_code(session: Session | None) -> str:
    """The code panel: the calls made so far, with the imports they need."""
    if session is None:
        return CODE_HINT
    body = "\n".join(session.code)
    if ".sampling = Sampling(" in body:
        body = "from dragonfarm_core.inference import Sampling\n\n" + body
    return present.python_code(body, imports=["os"] if "os.environ" in body else [])
