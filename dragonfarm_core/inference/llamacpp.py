"""The llama.cpp backend: a run's GGUF decoded by llama.cpp's own llama-server.

    b = backend_llamacpp(run)              # <run>/merged-f16.gguf, exported (and checked) once
    b = backend_llamacpp("model-f16.gguf") # any GGUF dragon.export_gguf wrote
    b.chat(None, [{"role": "user", "content": "Hi"}], Sampling(64, 0.0), print)

The GGUF is exported on demand through `gguf.export_gguf` (merge, llama.cpp's converter, the
template round-trip check) and reused while its check record says it passed. llama-server
renders each conversation with the chat template embedded in the GGUF (--jinja) and streams the
reply over its OpenAI-style chat route; the requests go straight to it with the standard
library (no client object per call: at several hundred tokens a second a few milliseconds of
overhead per request is already a tenth of a short reply).

Sampling follows the worker's semantics (`worker_decode`): the model's generation_config.json
(beside the GGUF's source folder) supplies the repetition penalty over the whole prompt and
reply and top_k, the request temperature and top_p, applied in transformers' order; temperature
0 is greedy, so greedy replies match the HF path's (tests/llamacpp/test_llamacpp_backend.py). Seeds are
llama.cpp's own: the same seed repeats a reply here, not the worker's reply.

Restart rules are the worker's: the server starts on the first call and stays up; one that died
is started again and the request retried once (a streamed reply then starts over), a second
death is an InferenceError quoting its log, and silence past `timeout` stops it
(InferenceTimeout; the next call starts it again). `stop()` ends it, and so does exit.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dragonfarm_core.inference.protocol import (
    Completion,
    InferenceError,
    InferenceTimeout,
    Message,
    ModelSpec,
    OnToken,
    Sampling,
    stream_reply,
)
from dragonfarm_core.rundir import files

DEFAULT_TOP_K = 50  # transformers' top_k when a generation config sets none (worker_decode)


class ServerDied(Exception):
    """llama-server ended (or stopped accepting connections) while a request waited."""


def generation_defaults(folder: Path | None) -> dict[str, float]:
    """The repetition penalty and top_k the worker reads from the model's generation config."""
    config = files.read_json(folder / "generation_config.json") if folder else None
    config = config if isinstance(config, dict) else {}
    top_k = config.get("top_k")
    return {
        "repeat_penalty": float(config.get("repetition_penalty") or 1.0),
        "top_k": DEFAULT_TOP_K if top_k is None else int(top_k),
    }


def sampler_body(sampling: Sampling, defaults: dict[str, float], ctx: int) -> dict[str, Any]:
    """llama-server's sampler fields for `sampling`, in transformers' order: the penalty over
    the whole context, then temperature, top_k and top_p; greedy takes the argmax after the
    penalty. min_p, DRY and the other penalties are off (transformers has none of them)."""
    body: dict[str, Any] = {
        "max_tokens": sampling.max_new_tokens,
        "repeat_penalty": defaults["repeat_penalty"],
        "repeat_last_n": ctx,
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
        "min_p": 0.0,
        "cache_prompt": True,  # a chat's next turn reuses the earlier turns' prompt
    }  # fmt: skip
    if sampling.temperature == 0:
        body.update(temperature=0.0, top_k=1, top_p=1.0, samplers=["penalties", "top_k"])
    else:
        body.update(temperature=sampling.temperature, top_k=int(defaults["top_k"]),
                    top_p=sampling.top_p,
                    samplers=["penalties", "temperature", "top_k", "top_p"])  # fmt: skip
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.logit_bias:
        body["logit_bias"] = [list(b) for b in sampling.logit_bias]
    return body


def sse_pieces(response: Any, ends: dict[str, Any] | None = None) -> Iterator[str]:
    """The text pieces of an OpenAI-style server-sent event stream; `ends` gets its
    finish_reason and usage when given."""
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            raise InferenceError(f"llama-server could not answer: {event['error']}")
        if ends is not None and event.get("usage"):
            ends["usage"] = event["usage"]
        for choice in event.get("choices") or []:
            if ends is not None and choice.get("finish_reason"):
                ends["finish_reason"] = choice["finish_reason"]
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                yield piece


def source_folder(gguf: Path) -> Path | None:
    """The model folder a GGUF was exported from, by export_gguf's naming (<folder>-<quant>)."""
    folder = gguf.with_name(gguf.stem.rsplit("-", 1)[0])
    return folder if (folder / "config.json").is_file() else None


class LlamaCppBackend:
    """llama-server on one GGUF (a run's, exported on demand), started on the first call."""

    name = "llamacpp"

    def __init__(self, source: Any, quant: str = "f16", threads: int | None = None,
                 ctx: int = 4096, slots: int = 4, timeout: float = 300.0) -> None:  # fmt: skip
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout = {timeout!r}; use a number of seconds above 0.")
        self.source, self.quant, self.ctx, self.slots = source, quant, int(ctx), int(slots)
        self.threads = threads or os.cpu_count() or 2
        self.timeout = float(timeout)
        self._gguf: Path | None = None
        self._server: Any = None
        self._defaults: dict[str, float] = {}
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def __repr__(self) -> str:
        return f"backend_llamacpp({str(self.source)!r}, quant={self.quant!r})"

    @property
    def model(self) -> str:
        """The GGUF's name once known, else what was passed (a run or a file)."""
        if self._gguf is not None:
            return self._gguf.stem
        return Path(str(getattr(self.source, "dir", self.source))).name

    def gguf(self) -> Path:
        """The GGUF served: the file passed, or the run's export (made and checked once)."""
        if self._gguf is None:
            from dragonfarm_core.export import gguf

            path = Path(str(self.source)).expanduser()
            if path.suffix.lower() == ".gguf":
                if not path.is_file():
                    raise InferenceError(f"{path} is not a file; pass a GGUF export_gguf wrote.")
                self._gguf = path.resolve()
            else:
                merged = gguf.resolve_source(self.source).merged
                out = gguf.default_out_file(merged, self.quant)
                record = gguf.read_check(out)
                if record is None or not record.get("passed"):
                    out = gguf.export_gguf(self.source, out_file=out, quant=self.quant)
                self._gguf = out
            self._defaults = generation_defaults(source_folder(self._gguf))
        return self._gguf

    def running(self) -> Any:
        """The LlamaServer on the GGUF, started if it is not running."""
        from dragonfarm_core.llamacpp.location import find_llama_cpp
        from dragonfarm_core.llamacpp.server import LlamaServer, LlamaServerError

        with self._lock:
            if self._server is not None and self._server.process.poll() is not None:
                self._server.stop()
                self._server = None
            if self._server is None:
                path = self.gguf()
                try:
                    self._server = LlamaServer.start(
                        find_llama_cpp(), path, threads=self.threads, ctx=self.ctx * self.slots,
                        slots=self.slots, log=path.parent / f".{path.name}.backend.log",
                    )  # fmt: skip
                except LlamaServerError as e:
                    raise InferenceError(str(e)) from None
            return self._server

    def stop(self) -> bool:
        """Stop llama-server; True if it was running. The next call starts it again."""
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return False
        server.stop()
        return True

    def _stream(
        self, server: Any, body: dict[str, Any], ends: dict[str, Any] | None = None
    ) -> Iterator[str]:
        request = urllib.request.Request(
            f"{server.url}/v1/chat/completions", data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {server.api_key}"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                yield from sse_pieces(response, ends)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", errors="replace")[:500]
            raise InferenceError(f"llama-server answered {e.code}: {detail}") from None
        except (OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                raise TimeoutError(str(reason)) from None
            if server.process.poll() is not None or isinstance(reason, ConnectionError):
                raise ServerDied(f"{type(reason).__name__}: {reason}") from None
            raise InferenceError(f"llama-server could not be reached: {reason}") from None

    def chat(self, model: ModelSpec | None, messages: list[Message], sampling: Sampling,
             on_token: OnToken | None = None) -> str:  # fmt: skip
        """One reply, streamed to `on_token`; `model` is ignored (the GGUF is the model)."""
        return self.complete(model, messages, sampling, on_token).text

    def complete(self, model: ModelSpec | None, messages: list[Message], sampling: Sampling,
                 on_token: OnToken | None = None) -> Completion:  # fmt: skip
        """`chat`'s reply with llama-server's finish_reason and token counts; `on_token` may
        raise `Cancelled` (the connection closes and llama-server stops decoding)."""
        for attempt in (1, 2):
            server = self.running()
            body = {"messages": messages, "stream": True,
                    "stream_options": {"include_usage": True},
                    **sampler_body(sampling, self._defaults, self.ctx)}  # fmt: skip
            ends: dict[str, Any] = {"finish_reason": "stop", "usage": {}}
            try:
                text = stream_reply(self._stream(server, body, ends), on_token or (lambda _: None))
                usage = ends["usage"]
                return Completion(text, ends["finish_reason"], int(usage.get(
                    "prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))  # fmt: skip
            except ServerDied as e:
                self._discard(server)
                if attempt == 2:
                    raise InferenceError(
                        f"llama-server died twice while answering ({e}); it is stopped and the "
                        f"next call starts it again. Its log ({server.log}) ends with:\n"
                        + server.log_tail()
                    ) from None
            except TimeoutError:
                self._discard(server)
                raise InferenceTimeout(
                    f"llama-server was silent for {self.timeout:g} s, so it was stopped (the "
                    "next call starts it again). Raise backend_llamacpp(timeout=...) for slow "
                    "models, or lower max_new_tokens."
                ) from None
        raise AssertionError("unreachable")

    def _discard(self, server: Any) -> None:
        with self._lock:
            if self._server is server:
                self._server = None
        server.stop()

    def generate(self, model: ModelSpec | None, conversations: list[list[Message]],
                 sampling: Sampling) -> list[str]:  # fmt: skip
        """One reply per conversation, `slots` decoded at once by llama-server."""
        if not conversations:
            return []
        self.running()  # started once, not by every thread
        with ThreadPoolExecutor(self.slots) as pool:
            return list(pool.map(lambda ic: self.chat(None, ic[1], sampling.nth(ic[0])),
                                 enumerate(conversations)))  # fmt: skip


def backend_llamacpp(
    source: Any, quant: str = "f16", threads: int | None = None, ctx: int = 4096,
    slots: int = 4, timeout: float = 300.0,
) -> LlamaCppBackend:  # fmt: skip
    """A run (its GGUF exported on demand and cached as <run>/merged-<quant>.gguf), a model
    folder or a GGUF file, decoded by llama.cpp's llama-server on this machine.

    quant: the export's type (f16 answers as the HF path does; q8_0 is faster on a CPU).
    threads: llama.cpp's threads (default all cores); ctx: tokens per conversation; slots:
    conversations decoded at once by `generate`; timeout: the longest silence of a request.
    """
    return LlamaCppBackend(source, quant=quant, threads=threads, ctx=ctx, slots=slots,
                           timeout=timeout)  # fmt: skip
