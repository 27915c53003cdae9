"""What every language-model function shares: the `Reply`, the batch call, retries and the cache.

An `LLM` is a callable from a list of prompts to a list of `Reply`, in order. A subclass says
how to ask one prompt (`_ask`) and which errors are worth retrying (`_retry_after`); this
module runs up to `max_active` prompts at once in threads, retries 429/5xx/timeouts with
exponential backoff (a server's `retry-after` wins, capped at `max_wait`), counts tokens, and
keeps answers in a response cache under the runs dir (the one a synthesis, judgement or
pipeline names: `caching_in`) so a rerun, in this session or a later one, does not pay twice.

Keys never leave memory: `describe()` names the environment variable a key came from, cache
files hold only `describe()` and the reply, and pickling an LLM drops the key and the client
(the copy reads the key from the environment again).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, location

CACHE_DIR = files.LLM_CACHE_DIR
# Bump when the cache file layout or the key's fields change: old entries are then ignored.
CACHE_VERSION = 1

JUDGE_SYSTEM = (
    "You are a careful evaluator. Answer with one JSON value only (usually an object), "
    "exactly as the request describes it: no prose before or after it and no code fences."
)


@dataclass(frozen=True, eq=False, repr=False)
class Reply(str):
    """One prompt's answer: a `str` (its text), so `f(prompts)` is a list of strings, with the
    record of how it came about in its fields. Only an `ok` reply counts as a reply: a
    refusal, an empty answer, an error or (for judges) an answer that is not JSON is recorded,
    with `text` kept for the record, and never to be scored as if the model had answered.

    Equality and hashing are the text's, as for any str (`f(["Hi"]) == ["Hello!"]`, a set of
    replies drops repeated texts); compare `as_dict()` to compare the fields too. String
    methods return plain str; JSON writes the text, `as_dict()` the whole record.
    """

    text: str = ""
    refusal: bool = False
    empty: bool = False
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    cached: bool = False
    """Read from the response cache: no request was made and no tokens were paid."""
    data: Any = None
    """A judge's parsed JSON answer (None for plain LLMs, and when `parse_error` is set)."""
    parse_error: str | None = None

    def __new__(cls, text: str = "", *args: Any, **values: Any) -> Reply:
        # The str value is the text; the dataclass's __init__ then sets every field.
        if not isinstance(text, str):
            raise TypeError(f"Reply text must be a str, got {type(text).__name__}.")
        return super().__new__(cls, text)

    @property
    def ok(self) -> bool:
        return not (self.refusal or self.empty or self.error or self.parse_error)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __repr__(self) -> str:
        # The text first, then only the fields that say more than a plain answer would.
        shown = [repr(self.text)] + [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name != "text" and getattr(self, f.name) != f.default
        ]
        return f"Reply({', '.join(shown)})"


class RetryableError(Exception):
    """Raised by `_ask` implementations that know an attempt is worth repeating."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLM:
    """A language model as a function: `f(prompts) -> list[Reply]`. Subclasses set `provider`."""

    provider = "llm"

    def __init__(
        self,
        model: str,
        system: str | None = None,
        sampling: dict[str, Any] | None = None,
        max_active: int = 4,
        judge: bool = False,
        cache: bool = True,
        retries: int = 4,
        backoff: float = 1.0,
        max_wait: float = 60.0,
        url: str | None = None,
        api_key_env: str | None = None,
    ) -> None:
        if isinstance(max_active, bool) or not isinstance(max_active, int) or max_active < 1:
            raise ValueError(f"max_active = {max_active!r}; use a whole number, 1 or more.")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries = {retries!r}; use a whole number, 0 or more.")
        if system is not None and not isinstance(system, str):
            raise TypeError("system must be a str or None.")
        self.model, self.system, self.url = model, system, url
        self.sampling = dict(sampling or {})
        self.max_active, self.judge, self.cache = max_active, judge, bool(cache)
        self.retries, self.backoff, self.max_wait = retries, float(backoff), float(max_wait)
        self.api_key_env = api_key_env
        # Where the response cache lives (<runs_dir>/llm_cache/); None: the session's runs dir.
        # `caching_in` sets it: synthesis, judging and pipeline steps call it with theirs.
        self.runs_dir: Path | None = None
        self._lock = threading.Lock()
        self.usage = _zero_usage()

    # -- what subclasses provide ------------------------------------------------------------

    def _ask(self, prompt: str, system: str | None) -> Reply:
        """One request for one prompt; raise RetryableError for a failure worth repeating."""
        raise NotImplementedError

    def _fetch(self, prompts: list[str]) -> list[Reply]:
        """Replies to prompts the cache did not have: threads, each retrying on its own."""
        if len(prompts) <= 1 or self.max_active == 1:
            return [self._with_retries(p) for p in prompts]
        with ThreadPoolExecutor(min(self.max_active, len(prompts))) as pool:
            return list(pool.map(self._with_retries, prompts))

    def _secrets(self) -> list[str]:
        """Values to scrub from error messages (the key)."""
        return []

    # -- the call ---------------------------------------------------------------------------

    @property
    def effective_system(self) -> str | None:
        """The system prompt sent: for judges, the JSON-only instruction first."""
        if not self.judge:
            return self.system
        return JUDGE_SYSTEM + (f"\n\n{self.system}" if self.system else "")

    def __call__(self, prompts: list[str], cache: bool | None = None) -> list[Reply]:
        """One Reply per prompt, in order. `cache=False` asks again even what is cached
        (the new answers still replace the cached ones)."""
        if isinstance(prompts, str) or not isinstance(prompts, list | tuple):
            raise TypeError(
                f"{type(self).__name__} takes a list of prompts, got "
                f"{type(prompts).__name__}; wrap a single prompt in a list: f([prompt])."
            )
        if not all(isinstance(p, str) for p in prompts):
            raise TypeError("Every prompt must be a str.")
        use_cache = self.cache if cache is None else bool(cache)
        keys = self._cache_keys(list(prompts))
        out: list[Reply | None] = [None] * len(prompts)
        if self.cache:
            for i, key in enumerate(keys):
                hit = self._cache_read(key) if use_cache else None
                if hit is not None:
                    out[i] = hit
                    self._count(cached=1)
        todo = [i for i, r in enumerate(out) if r is None]
        fresh = self._fetch([prompts[i] for i in todo]) if todo else []
        for i, reply in zip(todo, fresh, strict=True):
            reply = self._finish(reply)
            out[i] = reply
            self._count(
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
                refusals=int(reply.refusal),
                empty=int(reply.empty),
                errors=int(reply.error is not None),
                parse_errors=int(reply.parse_error is not None),
            )
            # Errors and unparsable judge answers are asked again next time, not remembered.
            if self.cache and reply.error is None and reply.parse_error is None:
                self._cache_write(keys[i], reply)
        return [r for r in out if r is not None]

    def _finish(self, reply: Reply) -> Reply:
        """Classify an answer: blank is empty; a judge's answer must parse as JSON."""
        if reply.error or reply.refusal:
            return reply
        if not reply.text.strip():
            return replace(reply, empty=True)
        if self.judge:
            try:
                return replace(reply, data=parse_json_answer(reply.text))
            except ValueError as e:
                return replace(reply, parse_error=str(e))
        return reply

    def _with_retries(self, prompt: str) -> Reply:
        for attempt in range(self.retries + 1):
            self._count(requests=1)
            try:
                return self._ask(prompt, self.effective_system)
            except RetryableError as e:
                if attempt == self.retries:
                    return Reply(error=f"{self._scrub(str(e))} (gave up after {attempt + 1} tries)")
                self._count(retries=1)
                time.sleep(self._wait(attempt, e.retry_after))
        raise AssertionError("unreachable")  # the loop always returns

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        """The server's retry-after if it sent one, else exponential backoff with jitter."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_wait)
        return min(self.backoff * 2**attempt * (1 + random.random() / 4), self.max_wait)

    def _scrub(self, text: str) -> str:
        for secret in self._secrets():
            if secret:
                text = text.replace(secret, "***")
        return text

    def _count(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self.usage[name] += amount

    def reset_usage(self) -> None:
        with self._lock:
            self.usage = _zero_usage()

    def sharing(self, **changes: Any) -> LLM:
        """A copy with `changes` that shares this one's key, client and usage counts (a
        shallow copy: `copy.copy` goes through `__getstate__`, which drops a key typed in)."""
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.__dict__.update(changes)
        return other

    def caching_in(self, runs_dir: str | os.PathLike[str] | None) -> LLM:
        """This function keeping its answers in `<runs_dir>/llm_cache/`, so a later session
        given the same runs dir asks nothing twice (None: as it is)."""
        if runs_dir is None or not str(runs_dir).strip():
            return self
        return self.sharing(runs_dir=location.runs_dir(runs_dir))

    # -- records ----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description for configs, pipeline records and code panels. A key is
        named by its environment variable only, never by value."""
        return {
            "provider": self.provider,
            "model": self.model,
            "url": self.url,
            "system": self.system,
            "judge": self.judge,
            "sampling": dict(self.sampling),
            "max_active": self.max_active,
            "api_key_env": self.api_key_env,
            "cache": self.cache,
        }

    def __repr__(self) -> str:
        d = self.describe()
        shown = ", ".join(f"{k}={d[k]!r}" for k in ("model", "url", "api_key_env") if d[k])
        return f"{type(self).__name__}({shown})"

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for a background pipeline: never the key, the client or the lock.
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._init_private()

    def _init_private(self) -> None:
        """Recreate in-memory-only state after unpickling (subclasses: key, client)."""

    # -- cache ------------------------------------------------------------------------------

    def _cache_identity(self) -> dict[str, Any]:
        """What makes two answers interchangeable: everything but bookkeeping settings."""
        d = self.describe()
        for bookkeeping in ("max_active", "cache", "api_key_env"):
            d.pop(bookkeeping, None)
        d["system"] = self.effective_system
        return d

    def _cache_keys(self, prompts: list[str]) -> list[str]:
        """A hash per prompt; a prompt repeated within one call gets its repeat number in the
        key, so n samples of one prompt are n requests (and a rerun gets the same n back)."""
        identity = self._cache_identity()
        seen: dict[str, int] = {}
        keys = []
        for p in prompts:
            repeat = seen.get(p, 0)
            seen[p] = repeat + 1
            blob = json.dumps(
                {"v": CACHE_VERSION, **identity, "prompt": p, "repeat": repeat},
                sort_keys=True,
                ensure_ascii=False,
            )
            keys.append(hashlib.sha256(blob.encode()).hexdigest())
        return keys

    def _cache_path(self, key: str) -> Path:
        return location.runs_dir(self.runs_dir) / CACHE_DIR / key[:2] / f"{key}.json"

    def _cache_read(self, key: str) -> Reply | None:
        entry = files.read_record(self._cache_path(key))  # torn or damaged: a miss
        if entry is None or entry.get("v") != CACHE_VERSION:
            return None
        fields = entry.get("reply")
        if not isinstance(fields, dict):
            return None
        try:
            return replace(Reply(**fields), cached=True)
        except TypeError:  # a file from another layout: ask again
            return None

    def _cache_write(self, key: str, reply: Reply) -> None:
        path = self._cache_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"v": CACHE_VERSION, "llm": self._cache_identity(), "reply": reply.as_dict()}
        files.write_json(path, entry)


def _zero_usage() -> dict[str, int]:
    return {
        "requests": 0,
        "retries": 0,
        "cached": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "refusals": 0,
        "empty": 0,
        "errors": 0,
        "parse_errors": 0,
    }


def parse_json_answer(text: str) -> Any:
    """A judge's JSON answer; a ```json fence around it is tolerated, anything else is not
    (a parse failure is recorded, never guessed)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0] if body.rstrip().endswith("```") else body
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        snippet = text.strip()[:80]
        raise ValueError(f"not JSON ({e.msg} at character {e.pos}): {snippet!r}") from None


def retry_after_seconds(headers: Any) -> float | None:
    """The wait a 429/503 asks for: `retry-after-ms`, or `retry-after` in seconds or as a
    date; None when absent or unreadable."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None
