"""Inference backends: the local worker, llama.cpp, OpenAI-compatible servers, and Ollama.

Every function that generates text (`generate`, `chat`, judges, synthesis) takes a backend;
`backend()` is the session default. Only the worker subprocess imports torch.
"""

from dragonfarm_core.inference.default import backend, parse_backend, set_backend
from dragonfarm_core.inference.llamacpp import LlamaCppBackend, backend_llamacpp
from dragonfarm_core.inference.local import LocalBackend, backend_local, worker_stop
from dragonfarm_core.inference.ollama import OllamaBackend, backend_ollama
from dragonfarm_core.inference.protocol import (
    Backend,
    InferenceError,
    InferenceTimeout,
    Message,
    ModelSpec,
    Sampling,
)
from dragonfarm_core.inference.server import ServerBackend, backend_server

__all__ = [
    "Backend",
    "InferenceError",
    "InferenceTimeout",
    "LlamaCppBackend",
    "LocalBackend",
    "Message",
    "ModelSpec",
    "OllamaBackend",
    "Sampling",
    "ServerBackend",
    "backend",
    "backend_llamacpp",
    "backend_local",
    "backend_ollama",
    "backend_server",
    "parse_backend",
    "set_backend",
    "worker_stop",
]
