"""`generate`: replies from a run or a model, for one prompt or many.

    dragon.generate(run, "My thermostat keeps dropping off Wi-Fi.")
    dragon.generate(run, ["prompt one", "prompt two"], temperature=0)   # batched

Runs through the session's backend (see `dragonfarm_core.inference`): by default the local
worker, which keeps the last two models loaded so only the first call pays the load. A list
of prompts goes to the backend in one call, which the local worker generates in batches.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.inference.default import backend as default_backend
from dragonfarm_core.inference.protocol import Backend, Message, Sampling
from dragonfarm_core.inference.target import Target, resolve_target, run_dir_of


def conversation(prompt: str, system: str | None = None) -> list[Message]:
    """A single-turn conversation in the training message format."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


def target_for(x: Any, base: bool, backend: Backend) -> Target:
    """The weights behind `x`, checked against what the backend can do."""
    if backend.model is not None:  # server and Ollama backends answer with their own model
        if base:
            raise ValueError(
                f"base=True needs the local backend: {backend!r} always answers "
                f"with its model {backend.model!r}."
            )
        run_dir = run_dir_of(x) if x is not None else None
        if run_dir is not None:
            return Target(
                spec=None,
                name=run_dir.name,
                run_dir=str(run_dir.resolve()),
                source=str(run_dir.resolve()),
            )
        return Target(spec=None, name=backend.model, source=None if x is None else str(x))
    if x is None:
        raise ValueError(
            "Which model? Pass a run, a run directory, a model id or a model "
            "folder (the local backend loads it)."
        )
    return resolve_target(x, base)


def generate(
    x: Any,
    prompt: str | list[str],
    system: str | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 0.9,
    base: bool = False,
    backend: Backend | None = None,
    seed: int | None = None,
) -> str | list[str]:
    """Replies from a run or model: a str for a str prompt, a list (in order) for a list.

    x: a Run, a run directory, a model id or a model folder. With a server or Ollama backend
    the backend's own model answers, and x only names it. base=True answers with the run's
    base model, without its adapter (local backend). temperature=0 is greedy decoding.
    seed: the same prompts with the same seed give the same replies (None: fresh each call).
    """
    backend = backend or default_backend()
    sampling = Sampling(max_new_tokens, temperature, top_p, seed)
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list | tuple) or not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompt must be a str or a list of str.")
    if system is not None and not isinstance(system, str):
        raise TypeError("system must be a str or None.")
    target = target_for(x, base, backend)
    replies = backend.generate(target.spec, [conversation(p, system) for p in prompts], sampling)
    return replies[0] if isinstance(prompt, str) else list(replies)
