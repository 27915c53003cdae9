"""The server backend: any OpenAI chat-completions server (vLLM, llama.cpp, `dragonfarm serve`).

Talks through the official `openai` client, streaming included. The API key lives only in
memory: `repr` hides it and header values, and error messages are scrubbed of both, so neither
ends up in a log, a saved transcript or a feedback file.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dragonfarm_core.inference.protocol import (
    Cancelled,
    Completion,
    InferenceError,
    InferenceTimeout,
    Message,
    ModelSpec,
    OnToken,
    Sampling,
    stream_reply,
)

# Requests in flight at once for a batch: servers such as vLLM batch them on their side.
PARALLEL_REQUESTS = 4


class ServerBackend:
    """An OpenAI-compatible chat-completions endpoint serving one model."""

    name = "server"

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        url = (url or "").strip().rstrip("/")
        if not url.startswith(("http://", "https://")) or not url.endswith("/v1"):
            raise ValueError(
                f"url = {url!r}: give the server's base URL, starting with http:// "
                "or https:// and ending in /v1 (e.g. http://localhost:8000/v1)."
            )
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must name a model the server has (see its /v1/models).")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout = {timeout!r}; use a number of seconds above 0.")
        self.url, self.model, self.timeout = url, model.strip(), float(timeout)
        self._api_key = api_key
        self._headers = dict(headers or {})

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        headers = (
            "{" + ", ".join(f"{k!r}: '***'" for k in self._headers) + "}"
            if self._headers
            else "None"
        )
        return (
            f"backend_server(url={self.url!r}, model={self.model!r}, api_key={key}, "
            f"headers={headers})"
        )

    def _client(self) -> Any:
        from openai import OpenAI

        # Never fall back to OPENAI_API_KEY: that would send the person's OpenAI key to an
        # arbitrary server. Servers without authentication accept any token.
        return OpenAI(
            base_url=self.url,
            api_key=self._api_key or "none",
            default_headers=self._headers or None,
            timeout=self.timeout,
            max_retries=0,
        )

    def _scrub(self, text: str) -> str:
        for secret in [self._api_key, *self._headers.values()]:
            if secret:
                text = text.replace(secret, "***")
        return text

    def chat(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> str:
        options = self._options(messages, sampling)
        try:
            client = self._client()
            if on_token is None:
                response = client.chat.completions.create(**options)
                return (response.choices[0].message.content or "").strip()
            chunks = client.chat.completions.create(**options, stream=True)
            return stream_reply(
                (c.choices[0].delta.content if c.choices else None for c in chunks), on_token
            )
        except Exception as e:
            raise self._explain(e) from None

    def complete(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> Completion:
        """`chat`'s reply, streamed, with the server's finish_reason and token counts (its
        final usage chunk; 0 where it sends none). `on_token` may raise `Cancelled`."""
        options = self._options(messages, sampling)
        ends: dict[str, Any] = {"finish_reason": "stop", "usage": None}

        def pieces(chunks: Any) -> Iterator[str | None]:
            for c in chunks:
                ends["usage"] = c.usage or ends["usage"]
                for choice in c.choices:
                    ends["finish_reason"] = choice.finish_reason or ends["finish_reason"]
                    yield choice.delta.content

        try:
            chunks = self._client().chat.completions.create(
                **options, stream=True, stream_options={"include_usage": True}
            )
            text = stream_reply(pieces(chunks), on_token or (lambda _: None))
        except Cancelled:
            raise
        except Exception as e:
            raise self._explain(e) from None
        usage = ends["usage"]
        return Completion(
            text, ends["finish_reason"],
            usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
        )  # fmt: skip

    def _options(self, messages: list[Message], sampling: Sampling) -> dict[str, Any]:
        options = {
            "model": self.model,
            "messages": messages,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:  # best effort: servers that lack it ignore it
            options["seed"] = sampling.seed
        if sampling.stop:
            options["stop"] = list(sampling.stop)
        if sampling.logit_bias:
            options["logit_bias"] = {str(t): b for t, b in sampling.logit_bias}
        return options

    def generate(
        self, model: ModelSpec | None, conversations: list[list[Message]], sampling: Sampling
    ) -> list[str]:
        with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
            return list(
                pool.map(
                    lambda ic: self.chat(model, ic[1], sampling.nth(ic[0])),
                    enumerate(conversations),
                )
            )

    def _explain(self, error: Exception) -> InferenceError:
        import openai

        where = f"the server at {self.url}"
        if isinstance(error, openai.APITimeoutError):
            return InferenceTimeout(
                f"{where} did not answer within {self.timeout:g} s; check "
                "that it is up, or raise timeout=."
            )
        if isinstance(error, openai.APIConnectionError):
            return InferenceError(
                f"Could not connect to {where}: is it running, and is the URL right?"
            )
        if isinstance(error, openai.APIStatusError):
            detail = self._scrub(_status_detail(error))
            if error.status_code in (401, 403):
                return InferenceError(
                    f"{where} refused the request ({error.status_code}): "
                    f"check api_key (or headers). {detail}"
                )
            if error.status_code == 404:
                return InferenceError(
                    f"{where} has no model {self.model!r} or no chat "
                    f"completions route (404); list its models at "
                    f"{self.url}/models. {detail}"
                )
            return InferenceError(f"{where} failed with HTTP {error.status_code}. {detail}")
        if isinstance(error, InferenceError):
            return error
        return InferenceError(
            f"{where} sent an unusable answer: {self._scrub(f'{type(error).__name__}: {error}')}"
        )


def _status_detail(error: Any) -> str:
    """The server's own error message, from an OpenAI-style body or the raw text."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return str(message)[:500]
    return str(getattr(error, "message", "") or "")[:500]


def backend_server(
    url: str,
    model: str,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> ServerBackend:
    """Any server that speaks the OpenAI chat-completions protocol; `url` ends in /v1.

    The model must already be available on that server. The API key is kept in memory only.
    """
    return ServerBackend(url, model, api_key=api_key, headers=headers, timeout=timeout)
