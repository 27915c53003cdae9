"""A stand-in for the inference worker: the same JSON-lines protocol, no torch, instant start.

Run by the local backend when DRAGONFARM_WORKER_MODULE=fake_worker. It echoes the last user
message, streaming it word by word, and obeys commands in that message so the tests can make
it misbehave: "hang" (never answers), "die" (exits mid-request, every time), "die-once" and
"slow-once" (exit / stall only on the first try: FAKE_WORKER_MARKER says whether it happened),
"fail" (answers with an error event).
"""

import json
import os
import sys
import time
from pathlib import Path


def send(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def first_time() -> bool:
    marker = Path(os.environ["FAKE_WORKER_MARKER"])
    if marker.exists():
        return False
    marker.write_text("done")
    return True


def reply(request):
    rid = request["id"]
    texts = []
    for conversation in request["conversations"]:
        last = conversation[-1]["content"]
        if last == "hang":
            time.sleep(3600)
        if last == "die" or (last == "die-once" and first_time()):
            os._exit(3)
        if last == "fail":
            return {"id": rid, "event": "error", "error": "RuntimeError: asked to fail"}
        if request.get("stream"):
            stall = last == "slow-once" and first_time()  # marked before anyone can kill it
            send({"id": rid, "event": "token", "text": "echo:"})
            if stall:
                time.sleep(3600)
            for word in last.split():
                send({"id": rid, "event": "token", "text": " " + word})
        texts.append("echo: " + last)
    return {"id": rid, "event": "done", "texts": texts}


def main():
    print("fake worker starting", file=sys.stderr)
    send({"event": "ready", "pid": os.getpid()})
    for calls, line in enumerate(sys.stdin, start=1):
        request = json.loads(line)
        if request["op"] == "status":
            send(
                {
                    "id": request["id"],
                    "event": "done",
                    "status": {"pid": os.getpid(), "calls": calls, "argv": sys.argv[1:]},
                }
            )
        else:
            send(reply(request))


if __name__ == "__main__":
    main()
