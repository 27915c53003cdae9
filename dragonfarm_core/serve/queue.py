"""The line `dragonfarm serve`'s requests wait in for its one model, and the backend call each
one makes when its turn comes.

One request is answered at a time (the worker decodes one reply at a time); the others wait in
arrival order (an asyncio lock's waiters are served first come, first served), at most
`waiting` of them: past that a request is told to come back (429 with Retry-After, the
average turn times the requests ahead). A client that disconnects while waiting leaves the
line; one that disconnects while answered cancels its reply at the next token (`Job.cancel`),
so the next request does not wait for a reply nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from dragonfarm_core.inference.protocol import Cancelled, Completion, OnToken

# A new turn counts for this share of the running average that Retry-After is built from.
AVERAGE_WEIGHT = 0.2


class Line:
    """One request answered at a time; up to `waiting` more wait their turn in order."""

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self.lock = asyncio.Lock()
        self.count = 0  # answered and waiting
        self.turn_s = 1.0  # running average of a turn
        self.started = 0.0

    def join(self) -> bool:
        """Take a place in the line; False when it is full (the caller answers 429)."""
        if self.count > self.waiting:
            return False
        self.count += 1
        return True

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the average turn times the requests ahead."""
        return max(1, math.ceil(self.turn_s * self.count))

    async def wait_turn(self, request: Request) -> bool:
        """Wait for this request's turn (after `join`); False, its place given up, when the
        client disconnected first."""
        acquire = asyncio.ensure_future(self.lock.acquire())
        gone = asyncio.ensure_future(disconnected(request))
        await asyncio.wait({acquire, gone}, return_when=asyncio.FIRST_COMPLETED)
        left = gone.done()
        gone.cancel()
        if acquire.done():
            self.started = time.monotonic()
            if not left:
                return True
            self.release()  # it came at the moment the client left
            return False
        acquire.cancel()
        self.count -= 1
        return False

    def release(self) -> None:
        """End the current turn (on the event loop's thread)."""
        took = time.monotonic() - self.started
        self.turn_s += AVERAGE_WEIGHT * (took - self.turn_s)
        self.count -= 1
        self.lock.release()


async def disconnected(request: Request) -> None:
    """Returns once the client has gone (its body is read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Job:
    """One backend call in a thread. Its events arrive in `events`: ("token", text) for each
    piece, then ("done", Completion) or ("error", message); `on_end` runs on the event loop
    once the backend is free. Setting `cancel` stops the reply at its next piece."""

    def __init__(self, call: Callable[[OnToken], Completion], on_end: Callable[[], None]) -> None:
        self.loop = asyncio.get_running_loop()
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.cancel = threading.Event()
        thread = threading.Thread(
            target=self._work, args=(call, on_end), daemon=True, name="dragonfarm-serve-job"
        )
        thread.start()

    def _put(self, event: tuple[str, Any]) -> None:
        self._soon(self.events.put_nowait, event)

    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
            self.loop.call_soon_threadsafe(fn, *args)

    def _token(self, text: str) -> None:
        if self.cancel.is_set():
            raise Cancelled("the client went away")
        self._put(("token", text))

    def _work(self, call: Callable[[OnToken], Completion], on_end: Callable[[], None]) -> None:
        try:
            self._put(("done", call(self._token)))
        except Exception as e:  # Cancelled too: reported, read by nobody
            self._put(("error", str(e)))
        finally:
            self._soon(on_end)

    async def result(self, request: Request) -> Completion | str | None:
        """The completion, the backend's error message, or None when the client left first
        (the reply is cancelled)."""
        gone = asyncio.ensure_future(disconnected(request))
        try:
            while True:
                event = asyncio.ensure_future(self.events.get())
                await asyncio.wait({event, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not event.done():
                    event.cancel()
                    self.cancel.set()
                    return None
                kind, value = event.result()
                if kind != "token":
                    return value if isinstance(value, Completion | str) else str(value)
        finally:
            gone.cancel()
            self.cancel.set()  # a no-op once the reply is done; else the handler was cancelled
