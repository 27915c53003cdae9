"""A streamed chat completion: the server-sent events of one reply as the backend makes it.

The pieces are sent as the plain reply's text would be (`StreamedText`: cut before the first
stop text, without the whitespace the plain reply is stripped of), then a chunk with the
finish_reason, the usage chunk when the client asked for it (`stream_options.include_usage`),
and `[DONE]`. The client going away cancels the reply (`serve_queue.Job.cancel`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from dragonfarm_core.inference.protocol import cut_at_stop
from dragonfarm_core.serve.openai_wire import ChatRequest, usage
from dragonfarm_core.serve.queue import Job


class StreamedText:
    """Streamed pieces as the plain reply's text: cut before the first stop text, without the
    leading and trailing whitespace the plain reply is stripped of. Text that may begin a stop
    text, and trailing whitespace, are held back until what follows settles them."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop, self.seen, self.sent, self.ended = stop, "", 0, False

    def _out(self, settled: str) -> str:
        piece, self.sent = settled[self.sent :], max(self.sent, len(settled))
        return piece

    def feed(self, piece: str) -> str:
        """What of the reply can be sent now that `piece` came."""
        if self.ended:
            return ""
        self.seen += piece
        text, cut = cut_at_stop(self.seen, self.stop)
        if cut:
            self.ended = True
            return self._out(text.strip())
        held = max(
            (k for s in self.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0
        )
        return self._out(text[: len(text) - held].strip())

    def end(self) -> str:
        """The rest of the reply once the backend is done."""
        return "" if self.ended else self._out(cut_at_stop(self.seen, self.stop)[0].strip())


async def stream(job: Job, chat: ChatRequest, name: str) -> AsyncIterator[str]:
    """Server-sent events: a role chunk, a chunk per piece, a finish chunk, the usage chunk
    when asked (stream_options.include_usage), then [DONE]. The client going away (the
    generator closed) cancels the reply."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": name,
    }
    nothing = {"usage": None} if chat.include_usage else {}

    def chunk(delta: dict[str, str], finish: str | None = None) -> str:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return (
            f"data: {json.dumps({**base, 'choices': choices, **nothing}, ensure_ascii=False)}\n\n"
        )

    text = StreamedText(chat.sampling.stop)
    try:
        yield chunk({"role": "assistant", "content": ""})
        while True:
            kind, value = await job.events.get()
            piece = text.feed(value) if kind == "token" else text.end() if kind == "done" else ""
            if piece:
                yield chunk({"content": piece})
            if kind == "token":
                continue
            if kind == "done":
                yield chunk({}, value.finish_reason)
                if chat.include_usage:
                    body = {**base, "choices": [], "usage": usage(value)}
                    yield f"data: {json.dumps(body)}\n\n"
            else:
                body = {"error": {"message": value, "type": "server_error"}}
                yield f"data: {json.dumps(body)}\n\n"
            break
        yield "data: [DONE]\n\n"
    finally:
        job.cancel.set()  # a no-op once the reply is done
