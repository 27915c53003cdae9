"""The Ollama backend: a model registered with Ollama, through Ollama's own chat API.

Uses the official `ollama` client (`/api/chat`, NDJSON streaming). The two failures people
meet first get plain messages: Ollama not running at the URL, and a model it does not have.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.inference.protocol import (
    InferenceError,
    InferenceTimeout,
    Message,
    ModelSpec,
    OnToken,
    Sampling,
    stream_reply,
)

DEFAULT_URL = "http://localhost:11434"


class OllamaBackend:
    """Chat with a model that Ollama serves on this (or another) machine."""

    name = "ollama"

    def __init__(self, model: str, url: str = DEFAULT_URL, timeout: float = 300.0) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must name an Ollama model (see `ollama list`).")
        url = (url or "").strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url = {url!r}: give Ollama's address, e.g. {DEFAULT_URL}.")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout = {timeout!r}; use a number of seconds above 0.")
        self.model, self.url, self.timeout = model.strip(), url, float(timeout)

    def __repr__(self) -> str:
        return f"backend_ollama(model={self.model!r}, url={self.url!r})"

    def chat(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> str:
        from ollama import Client

        options: dict[str, Any] = {
            "num_predict": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            options["seed"] = sampling.seed
        if sampling.stop:
            options["stop"] = list(sampling.stop)
        if sampling.logit_bias:
            raise InferenceError("Ollama takes no logit_bias: leave it out for this backend.")
        client = Client(host=self.url, timeout=self.timeout)
        try:
            if on_token is None:
                response = client.chat(model=self.model, messages=messages, options=options)
                return (response.message.content or "").strip()
            chunks = client.chat(model=self.model, messages=messages, options=options, stream=True)
            return stream_reply((c.message.content for c in chunks), on_token)
        except Exception as e:
            raise self._explain(e) from None

    def generate(
        self, model: ModelSpec | None, conversations: list[list[Message]], sampling: Sampling
    ) -> list[str]:
        # Ollama queues parallel requests per model anyway, so one at a time loses nothing.
        return [self.chat(model, c, sampling.nth(i)) for i, c in enumerate(conversations)]

    def _explain(self, error: Exception) -> InferenceError:
        import httpx
        from ollama import ResponseError

        if isinstance(error, httpx.TimeoutException):
            return InferenceTimeout(
                f"Ollama at {self.url} did not answer within "
                f"{self.timeout:g} s; a large model may still be loading. "
                "Try again, or raise timeout=."
            )
        if isinstance(error, ConnectionError | httpx.ConnectError):
            return InferenceError(
                f"Ollama is not running at {self.url}: start it with "
                "`ollama serve` (or the Ollama app), or pass its url=."
            )
        if isinstance(error, ResponseError):
            if error.status_code == 404 or "not found" in str(error.error).lower():
                return InferenceError(
                    f"Ollama at {self.url} has no model {self.model!r}: pull it with `ollama "
                    f"pull {self.model}`, or check `ollama list` for the names it has."
                )
            status = f"HTTP {error.status_code}" if error.status_code > 0 else "an error"
            return InferenceError(f"Ollama at {self.url} answered {status}: {error.error}")
        return InferenceError(
            f"Ollama at {self.url} sent an unusable answer: {type(error).__name__}: {error}"
        )


def backend_ollama(model: str, url: str = DEFAULT_URL, timeout: float = 300.0) -> OllamaBackend:
    """A model registered with Ollama (`ollama list`), served at `url`."""
    return OllamaBackend(model, url=url, timeout=timeout)
