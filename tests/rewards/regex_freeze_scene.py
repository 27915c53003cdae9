"""A backtracking regex reward, in a process of its own that serves the real app meanwhile.

    python tests/rewards/regex_freeze_scene.py RUNS_DIR      # prints one JSON line

Run by test_reward_timeouts.py under a deadline. Python's re holds the GIL for a whole search,
so while the rewards scored in the calling process, `(.+)+\\x00` froze every thread of it: the
HTTP server too, and the scene hung until the deadline ended it.

The scene: the app is served; the Train tab's dry run (the handler the Dry run button calls,
in a thread as Gradio runs it) scores sampled completions with the pattern, and once they are
sampled, the page is asked for over HTTP. Then score() as the GRPO trainer calls it.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import get_profile
from dragonfarm_core.method_args import ReinforceArgs
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.rewards import RewardError, RewardErrors, score
from ui.layout import build_app
from ui.settings_form import shown_fields
from ui.tabs import train

BACKTRACKS = r"(.+)+\x00"  # on text without a NUL byte: exponential in its length
LONG = "a" * 40


class SampledBackend:
    """Answers like a server backend; says when the completions have been handed over."""

    name, model = "scripted", "scripted-model"

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.sampled = replies, threading.Event()

    def generate(self, model: Any, conversations: list, sampling: Any) -> list[str]:
        self.sampled.set()
        return [self.replies[i % len(self.replies)] for i in range(len(conversations))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dry_run_while_serving(runs: Path) -> dict[str, Any]:
    port = _free_port()
    app = build_app(runs, get_profile("local"))
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    prompts = dragon.dataset(pd.DataFrame({"q": ["Reset my router", "Where is T-1?"]}))
    values = {f.name: getattr(ReinforceArgs(), f.name) for f in shown_fields(ReinforceArgs)}
    backend, out = SampledBackend([LONG, "ok\x00"]), {}
    model = ResolvedModel("any-model", "any-model", None)
    rewards = [dragon.reward("regex", pattern=BACKTRACKS)]

    def press_dry_run() -> None:
        started = time.monotonic()
        out["returned"] = train.dry_run(prompts.map_prompts(prompt="q"), model, "", rewards,
                                        values, backend=backend, runs_dir=runs)  # fmt: skip
        out["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=press_dry_run)
    worker.start()
    try:
        assert backend.sampled.wait(60), "the dry run never sampled"
        status = httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code
        alive = worker.is_alive()
        worker.join()
    finally:
        app.close()
    return {"page_status": status, "dry_run_still_going": alive,
            "message": out["returned"][3], "seconds": out["seconds"]}  # fmt: skip


def training_scores() -> dict[str, Any]:
    errors = RewardErrors(min_calls=3)
    rewards = [dragon.reward("regex", pattern=BACKTRACKS)]
    scores = score(rewards, ["p"] * 3, [LONG, "ok\x00", "b" * 40], errors=errors)
    try:
        errors.check()
        stopped = ""
    except RewardError as e:
        stopped = str(e)
    return {"scores": scores.total, "counts": errors.counts()["regex"], "stopped": stopped}


if __name__ == "__main__":
    result = dry_run_while_serving(Path(sys.argv[1]))
    print(json.dumps(result | {"training": training_scores()}))
