"""The session's default backend: `backend()`, `set_backend(b)` and DRAGONFARM_BACKEND.

Order: a backend given to `set_backend`, else the DRAGONFARM_BACKEND environment variable,
else the local worker. DRAGONFARM_BACKEND takes one of:

    local                      the local worker (the default)
    ollama:MODEL               a model registered with Ollama at http://localhost:11434
    ollama:MODEL|URL           ... at another address
    server:URL|MODEL           an OpenAI-compatible server; URL ends in /v1
    llamacpp:RUN               a run (or model folder, or GGUF file) decoded by llama.cpp

A server's API key is read from DRAGONFARM_BACKEND_API_KEY when that is set: the key itself
never goes in DRAGONFARM_BACKEND, config files or logs.
"""

from __future__ import annotations

import os

from dragonfarm_core.inference.llamacpp import backend_llamacpp
from dragonfarm_core.inference.local import backend_local
from dragonfarm_core.inference.ollama import backend_ollama
from dragonfarm_core.inference.protocol import Backend
from dragonfarm_core.inference.server import backend_server

ENV = "DRAGONFARM_BACKEND"
API_KEY_ENV = "DRAGONFARM_BACKEND_API_KEY"
FORMS = "'local', 'ollama:MODEL', 'ollama:MODEL|URL', 'server:URL|MODEL' or 'llamacpp:RUN'"

_session: Backend | None = None


def set_backend(b: Backend | None) -> Backend | None:
    """Make `b` the session default (None goes back to DRAGONFARM_BACKEND or local).

    Returns the previous session backend, so a caller can restore it.
    """
    global _session
    if b is not None and not isinstance(b, Backend):
        raise TypeError(
            f"set_backend takes a backend (backend_local(), backend_server(...), "
            f"backend_ollama(...)) or None, not {type(b).__name__}."
        )
    previous, _session = _session, b
    return previous


def backend() -> Backend:
    """The session default: set_backend's, else DRAGONFARM_BACKEND's, else the local worker."""
    if _session is not None:
        return _session
    return parse_backend(os.environ.get(ENV, ""))


def parse_backend(text: str) -> Backend:
    """A backend from DRAGONFARM_BACKEND's syntax (see the module docstring)."""
    text = text.strip()
    if text in ("", "local"):
        return backend_local()
    kind, _, rest = text.partition(":")
    parts = [p.strip() for p in rest.split("|")]
    if kind == "ollama" and parts[0] and len(parts) == 1:
        return backend_ollama(parts[0])
    if kind == "ollama" and parts[0] and len(parts) == 2:
        return backend_ollama(parts[0], url=parts[1])
    if kind == "llamacpp" and rest.strip():
        return backend_llamacpp(rest.strip())
    if kind == "server" and len(parts) == 2 and all(parts):
        return backend_server(parts[0], parts[1], api_key=os.environ.get(API_KEY_ENV) or None)
    raise ValueError(f"{ENV}={text!r} is not understood: use {FORMS}.")
