"""The language-model functions: Claude, any OpenAI-compatible server, a chatlas chat, a local run.

    teacher = dragon.llm_anthropic(system="You are a concise support agent.")
    replies = teacher(["My thermostat drops off Wi-Fi.", "Invoice total looks wrong."])
    judge = dragon.judge_openai("qwen2.5-7b", url="http://localhost:8000/v1")

The API clients are the official `anthropic` and `openai` packages, created with their own
retries off (`base.LLM` retries, honouring retry-after, so the counts and waits are ours).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from dragonfarm_core.inference.protocol import InferenceError
from dragonfarm_core.llm.base import LLM, Reply, RetryableError, retry_after_seconds

ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
ANTHROPIC_URL_ENV = "ANTHROPIC_BASE_URL"
DEFAULT_CLAUDE = "claude-opus-5"
# Statuses worth asking again: request timeout, conflict, rate limit, and server trouble
# (Anthropic's 529 "overloaded" included).
RETRY_STATUSES = frozenset({408, 409, 429})


def _retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


class _ApiLLM(LLM):
    """Shared by the two HTTP providers: key handling and the clients' error classes."""

    def __init__(self, *args: Any, api_key: str | None, timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout = {timeout!r}; use a number of seconds above 0.")
        self.timeout = float(timeout)
        self._given_key = api_key
        self._init_private()

    def _init_private(self) -> None:
        self._given_key = getattr(self, "_given_key", None)
        self._client_cache: Any = None

    @property
    def _api_key(self) -> str | None:
        if self._given_key:
            return self._given_key
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env, "").strip() or None

    def _secrets(self) -> list[str]:
        return [k for k in [self._api_key] if k]

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        # A key typed in (not from the environment) is said to exist, never recorded.
        if self._given_key:
            d["api_key_env"] = None
            d["api_key"] = "passed as an argument (not recorded)"
        d["timeout"] = self.timeout
        return d

    def _cache_identity(self) -> dict[str, Any]:
        d = super()._cache_identity()
        d.pop("api_key", None)
        d.pop("timeout", None)
        return d

    def _client(self) -> Any:
        with self._lock:
            if self._client_cache is None:
                self._client_cache = self._make_client()
            return self._client_cache

    def _make_client(self) -> Any:
        raise NotImplementedError

    def _sdk(self) -> Any:
        """The client package (anthropic or openai): both name their errors alike."""
        raise NotImplementedError

    def _call_api(self, request: Any) -> Any:
        """`request(client)`, with the client's errors sorted into retry / record / stop."""
        errors = self._sdk()
        where = f"{self.provider} ({self.url or 'default URL'})"
        try:
            return request(self._client())
        except errors.APITimeoutError:
            raise RetryableError(f"{where} did not answer within {self.timeout:g} s") from None
        except errors.APIConnectionError as e:
            raise RetryableError(f"could not connect to {where}: {e}") from None
        except errors.APIStatusError as e:
            detail = self._scrub(str(getattr(e, "message", "") or e))[:500]
            status = e.status_code
            if _retryable_status(status):
                raise RetryableError(
                    f"{where} answered HTTP {status}: {detail}",
                    retry_after_seconds(getattr(e.response, "headers", None)),
                ) from None
            if status in (401, 403):
                raise InferenceError(
                    f"{where} refused the key (HTTP {status}): check api_key= or "
                    f"{self.api_key_env or 'the key you passed'}. {detail}"
                ) from None
            if status == 404:
                raise InferenceError(
                    f"{where} has no model {self.model!r} or no such route (HTTP 404). {detail}"
                ) from None
            # Anything else (400 too long, 422...) is about this prompt: record it.
            return Reply(error=f"{where} rejected the request (HTTP {status}): {detail}")


class AnthropicLLM(_ApiLLM):
    """Claude through the official `anthropic` client (the Messages API)."""

    provider = "anthropic"

    def _make_client(self) -> Any:
        import anthropic

        key = self._api_key
        if not key:
            raise InferenceError(
                f"No Anthropic API key: set {self.api_key_env} in the environment, or pass "
                "api_key= (it is kept in memory only)."
            )
        return anthropic.Anthropic(
            api_key=key, base_url=self.url, timeout=self.timeout, max_retries=0
        )

    def _sdk(self) -> Any:
        import anthropic

        return anthropic

    def _ask(self, prompt: str, system: str | None) -> Reply:
        options: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.sampling["max_tokens"],
            "messages": [{"role": "user", "content": prompt}],
        }
        if system:
            options["system"] = system
        if self.sampling.get("temperature") is not None:
            # Sent in the body: this client version's signature has no temperature argument.
            options["extra_body"] = {"temperature": self.sampling["temperature"]}
        message = self._call_api(lambda client: client.messages.create(**options))
        if isinstance(message, Reply):
            return message
        text = "".join(
            getattr(block, "text", "") or ""
            for block in message.content or []
            if getattr(block, "type", None) == "text"
        ).strip()
        usage = message.usage
        return Reply(
            text=text,
            refusal=message.stop_reason == "refusal",
            stop_reason=message.stop_reason,
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
        )


class OpenAILLM(_ApiLLM):
    """Any OpenAI chat-completions server through the official `openai` client."""

    provider = "openai"

    def _make_client(self) -> Any:
        from openai import OpenAI

        # Never OPENAI_API_KEY on its own: that would send the person's OpenAI key to whatever
        # server `url` names. Name it with api_key_env="OPENAI_API_KEY" to mean it.
        return OpenAI(
            base_url=self.url,
            api_key=self._api_key or "none",
            timeout=self.timeout,
            max_retries=0,
        )

    def _sdk(self) -> Any:
        import openai

        return openai

    def _ask(self, prompt: str, system: str | None) -> Reply:
        messages = [{"role": "system", "content": system}] if system else []
        options: dict[str, Any] = {
            "model": self.model,
            "messages": [*messages, {"role": "user", "content": prompt}],
            "max_tokens": self.sampling["max_tokens"],
        }
        if self.sampling.get("temperature") is not None:
            options["temperature"] = self.sampling["temperature"]
        response = self._call_api(lambda client: client.chat.completions.create(**options))
        if isinstance(response, Reply):
            return response
        if not response.choices:
            return Reply(error=f"{self.url} sent a completion with no choices.")
        choice = response.choices[0]
        refusal = getattr(choice.message, "refusal", None)
        usage = response.usage
        return Reply(
            text=(choice.message.content or refusal or "").strip(),
            refusal=bool(refusal) or choice.finish_reason == "content_filter",
            stop_reason=choice.finish_reason,
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )


class ChatlasLLM(LLM):
    """A `chatlas` chat (any provider chatlas supports); each prompt gets a fresh deep copy,
    so no history leaks from one question to the next."""

    provider = "chatlas"

    def __init__(self, chat: Any, *args: Any, **kwargs: Any) -> None:
        if not callable(getattr(chat, "chat", None)):
            raise TypeError(
                f"llm_chatlas needs a chatlas chat (e.g. chatlas.ChatAnthropic()), got "
                f"{type(chat).__name__}."
            )
        provider = getattr(chat, "provider", None)
        model = getattr(provider, "model", None) or getattr(chat, "model", None)
        super().__init__(str(model or type(chat).__name__), *args, **kwargs)
        self.chat = chat
        self.chat_provider = getattr(provider, "name", None)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "chat_provider": self.chat_provider}

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            "A chatlas chat cannot be saved for a background pipeline; use llm_anthropic() "
            "or llm_openai() there."
        )

    def _ask(self, prompt: str, system: str | None) -> Reply:
        chat = copy.deepcopy(self.chat)
        if system is not None:
            chat.system_prompt = system
        try:
            response = chat.chat(prompt, echo="none", stream=False)
        except Exception as e:
            # chatlas hides which client it uses; a status code, if any, tells retry from stop.
            status = getattr(e, "status_code", None)
            message = self._scrub(f"{type(e).__name__}: {e}")[:500]
            transient = any(w in type(e).__name__ for w in ("Timeout", "Connection"))
            if transient or (isinstance(status, int) and _retryable_status(status)):
                headers = getattr(getattr(e, "response", None), "headers", None)
                raise RetryableError(message, retry_after_seconds(headers)) from None
            raise InferenceError(f"The chatlas chat failed: {message}") from None
        turn = chat.get_last_turn()
        tokens = tuple(getattr(turn, "tokens", None) or (0, 0))
        finish = getattr(turn, "finish_reason", None)
        return Reply(
            text=str(response.get_content() if hasattr(response, "get_content") else response),
            refusal=finish == "content_filter",
            stop_reason=finish,
            input_tokens=int(tokens[0] or 0),
            output_tokens=int(tokens[1] or 0),
        )


class LocalLLM(LLM):
    """A run, a model id or a model folder, through dragonfarm's inference backend."""

    provider = "local"

    def __init__(self, x: Any, *args: Any, backend: Any = None, **kwargs: Any) -> None:
        from dragonfarm_core.inference.protocol import Sampling

        self.x = x
        where = getattr(x, "dir", x)
        name = str(Path(where).resolve()) if isinstance(where, Path) else str(where)
        super().__init__(name, *args, **kwargs)
        Sampling(**self.sampling)  # check the settings now, not at the first call
        self.backend = backend

    def _fetch(self, prompts: list[str]) -> list[Reply]:
        # One call: the backend batches (the local worker) or parallelises (a server) itself.
        from dragonfarm_core.conversation.generation import generate

        self._count(requests=len(prompts))
        replies = generate(
            self.x, prompts, system=self.effective_system, backend=self.backend, **self.sampling
        )
        return [Reply(text=(r or "").strip()) for r in replies]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["backend"] = None  # a live worker does not travel; the copy uses the default
        return state


def _chatlas_defaults(chat: Any, system: str | None, judge: bool) -> ChatlasLLM:
    # chatlas caches nothing of ours and its chat may be anything: the cache keys on the
    # chat's model only, so it is off unless asked for.
    return ChatlasLLM(chat, system=system, judge=judge, cache=False, max_active=1)


def llm_anthropic(
    model: str = DEFAULT_CLAUDE,
    system: str | None = None,
    api_key: str | None = None,
    max_tokens: int = 1024,
    max_active: int = 4,
    temperature: float | None = None,
    base_url: str | None = None,
    timeout: float = 120.0,
    cache: bool = True,
    retries: int = 4,
    max_wait: float = 60.0,
) -> AnthropicLLM:
    """Claude as a function: `f(prompts) -> list[Reply]`.

    The key is `api_key`, else ANTHROPIC_API_KEY; the URL `base_url`, else ANTHROPIC_BASE_URL,
    else Anthropic's. Up to `max_active` requests at once; 429/5xx/timeouts are retried
    `retries` times (retry-after honoured, waits capped at `max_wait` s). Answers are cached
    under the runs dir; `cache=False` skips it.
    """
    return AnthropicLLM(
        model,
        system=system,
        sampling=_api_sampling(max_tokens, temperature),
        max_active=max_active,
        cache=cache,
        retries=retries,
        max_wait=max_wait,
        url=base_url or os.environ.get(ANTHROPIC_URL_ENV) or None,
        api_key_env=ANTHROPIC_KEY_ENV,
        api_key=api_key,
        timeout=timeout,
    )


def judge_anthropic(
    model: str = DEFAULT_CLAUDE,
    system: str | None = None,
    api_key: str | None = None,
    max_tokens: int = 1024,
    max_active: int = 4,
    temperature: float | None = None,
    base_url: str | None = None,
    timeout: float = 120.0,
    cache: bool = True,
    retries: int = 4,
    max_wait: float = 60.0,
) -> AnthropicLLM:
    """`llm_anthropic` asking for JSON-only answers; each Reply's `.data` is the parsed JSON,
    or `.parse_error` says why it is not JSON."""
    f = llm_anthropic(
        model=model, system=system, api_key=api_key, max_tokens=max_tokens,
        max_active=max_active, temperature=temperature, base_url=base_url, timeout=timeout,
        cache=cache, retries=retries, max_wait=max_wait,
    )  # fmt: skip
    f.judge = True
    return f


def llm_openai(
    model: str,
    url: str,
    api_key: str | None = None,
    system: str | None = None,
    max_tokens: int = 1024,
    max_active: int = 4,
    temperature: float | None = None,
    api_key_env: str | None = None,
    timeout: float = 120.0,
    cache: bool = True,
    retries: int = 4,
    max_wait: float = 60.0,
) -> OpenAILLM:
    """Any OpenAI-compatible server (vLLM, llama.cpp, Ollama's /v1, `dragonfarm serve`,
    OpenAI itself) as a function. `url` ends in /v1. The key is `api_key`, else the
    environment variable named by `api_key_env` (never OPENAI_API_KEY unless named)."""
    url = (url or "").strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or not url.endswith("/v1"):
        raise ValueError(
            f"url = {url!r}: give the server's base URL, starting with http:// or https:// "
            "and ending in /v1 (e.g. http://localhost:8000/v1)."
        )
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must name a model the server has (see its /v1/models).")
    return OpenAILLM(
        model.strip(),
        system=system,
        sampling=_api_sampling(max_tokens, temperature),
        max_active=max_active,
        cache=cache,
        retries=retries,
        max_wait=max_wait,
        url=url,
        api_key_env=api_key_env,
        api_key=api_key,
        timeout=timeout,
    )


def judge_openai(
    model: str,
    url: str,
    api_key: str | None = None,
    system: str | None = None,
    max_tokens: int = 1024,
    max_active: int = 4,
    temperature: float | None = None,
    api_key_env: str | None = None,
    timeout: float = 120.0,
    cache: bool = True,
    retries: int = 4,
    max_wait: float = 60.0,
) -> OpenAILLM:
    """`llm_openai` asking for JSON-only answers (see `judge_anthropic`)."""
    f = llm_openai(
        model, url, api_key=api_key, system=system, max_tokens=max_tokens,
        max_active=max_active, temperature=temperature, api_key_env=api_key_env,
        timeout=timeout, cache=cache, retries=retries, max_wait=max_wait,
    )  # fmt: skip
    f.judge = True
    return f


def llm_chatlas(chat: Any, system: str | None = None) -> ChatlasLLM:
    """A chatlas chat as a function; each prompt is asked of a fresh copy of `chat`.
    `system` replaces the chat's system prompt. Not cached (chatlas chats carry settings the
    cache cannot see) and asked one prompt at a time."""
    return _chatlas_defaults(chat, system, judge=False)


def judge_chatlas(chat: Any, system: str | None = None) -> ChatlasLLM:
    """`llm_chatlas` asking for JSON-only answers (see `judge_anthropic`)."""
    return _chatlas_defaults(chat, system, judge=True)


def llm_local(
    x: Any,
    system: str | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 0.9,
    backend: Any = None,
    cache: bool = False,
    seed: int | None = None,
) -> LocalLLM:
    """A run, a run directory, a model id or a model folder as a function, through
    `generate()` and the session's backend (or `backend`). Not cached by default: a run's
    weights can change under the same name (resume), and local answers cost no money.
    With a seed, the same prompts give the same replies (each call starts from it)."""
    sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p}
    return LocalLLM(
        x,
        system=system,
        sampling=sampling if seed is None else sampling | {"seed": seed},
        cache=cache,
        backend=backend,
    )


def judge_local(
    x: Any,
    system: str | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 0.9,
    backend: Any = None,
    cache: bool = False,
) -> LocalLLM:
    """`llm_local` asking for JSON-only answers, greedy by default."""
    f = llm_local(x, system, max_new_tokens, temperature, top_p, backend, cache)
    f.judge = True
    return f


def _api_sampling(max_tokens: int, temperature: float | None) -> dict[str, Any]:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens = {max_tokens!r}; use a whole number, 1 or more.")
    if temperature is not None and not 0 <= temperature <= 2:
        raise ValueError(f"temperature = {temperature!r}; use 0 to 2, or None for the default.")
    return {"max_tokens": max_tokens, "temperature": temperature}
