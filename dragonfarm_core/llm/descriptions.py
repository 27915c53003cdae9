"""How an LLM crosses into a job: its `describe()` record, and its key apart.

    record = llm.describe()                    # no key in it: it goes into the job's spec.json
    key = api_key_of(llm)                      # handed to the job on stdin, never written
    same = llm_from_description(record, key)   # the job's side: the LLM again, key in memory

Anthropic, OpenAI-compatible and local models can be rebuilt; a chatlas chat or a plain
Python function cannot, and is refused before a job starts.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.llm import (
    LLM,
    judge_anthropic,
    judge_local,
    judge_openai,
    llm_anthropic,
    llm_local,
    llm_openai,
)


def llm_from_description(description: dict[str, Any], api_key: str | None = None) -> LLM:
    """The LLM an `LLM.describe()` record describes, with `api_key` (kept in memory only).

    Anthropic, OpenAI-compatible and local models can be rebuilt; a chatlas chat or a plain
    Python function cannot (nothing in a record says how to make them again)."""
    if not isinstance(description, dict):
        raise TypeError("An LLM description is a dict, as LLM.describe() returns it.")
    provider = description.get("provider")
    judge = bool(description.get("judge"))
    sampling = description.get("sampling") or {}
    system = description.get("system")
    model = description.get("model")
    common: dict[str, Any] = {"system": system, "cache": bool(description.get("cache", True))}
    if provider in ("anthropic", "openai"):
        common.update(
            max_tokens=int(sampling.get("max_tokens") or 1024),
            temperature=sampling.get("temperature"),
            max_active=int(description.get("max_active") or 4),
            timeout=float(description.get("timeout") or 120.0),
            api_key=api_key,
        )
    if provider == "anthropic":
        if judge:
            return judge_anthropic(model=str(model), base_url=description.get("url"), **common)
        return llm_anthropic(model=str(model), base_url=description.get("url"), **common)
    if provider == "openai":
        url = str(description.get("url") or "")
        key_env = description.get("api_key_env")
        if judge:
            return judge_openai(str(model), url, api_key_env=key_env, **common)
        return llm_openai(str(model), url, api_key_env=key_env, **common)
    if provider == "local":
        make_local = judge_local if judge else llm_local
        return make_local(
            str(model),
            system,
            max_new_tokens=int(sampling.get("max_new_tokens") or 256),
            temperature=float(sampling.get("temperature", 0.0 if judge else 0.7)),
            top_p=float(sampling.get("top_p", 0.9)),
            cache=bool(description.get("cache", False)),
        )
    raise ValueError(
        f"A {provider or 'plain function'} judge or teacher cannot run as a background job: "
        "use an Anthropic, OpenAI-compatible or local model there, or call the function in "
        "Python."
    )


def api_key_of(llm: Any) -> str | None:
    """The key an API LLM would send (typed in, or read from its environment variable): the
    one thing the child needs that its description leaves out."""
    key = getattr(llm, "_api_key", None)  # _ApiLLM: the given key, else the named variable's
    return key if isinstance(key, str) and key else None
