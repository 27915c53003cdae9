"""A custom reward that never returns, dry-run in a process of its own (the app's place).

    python tests/rewards/custom_freeze_scene.py FOLDER      # prints one JSON line

Run by test_reward_custom_dry_run.py under a deadline. The reward's function runs a search
that backtracks without end (`re` holds the GIL for all of it) on one completion, and its file
prints at import. The scene creates the reward and dry-runs it (dragon.test_rewards, as the
Train tab's Dry run button does) in a thread while this process's main thread keeps ticking:
run here, as it was, the dry run never ended and the ticks stopped.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.rewards import RewardError, reward, scoring

CODE = r"""
import re
print("imported: this line must not reach the helper's answers")


def reward(prompt, completion, reference, row):
    print("scoring", completion)
    if completion == "slow":
        re.search(r"(.+)+\x00", "a" * 40)  # exponential in the length: never returns
    return len(completion) + len(row.get("note", ""))
"""
LIMIT_S = 1.0


class Scripted:
    name, model = "scripted", "scripted-model"

    def generate(self, model: Any, conversations: list, sampling: Any) -> list[str]:
        return ["fine", "slow"][: len(conversations)]


def main(folder: Path) -> dict[str, Any]:
    file = folder / "my_reward.py"
    file.write_text(CODE)
    scoring.CUSTOM_TIMEOUT_S = LIMIT_S  # the dry run's limit, lowered for the scene
    mine = reward("custom", file=str(file), name="mine")
    imported_here = any(name.startswith("dragonfarm_custom_reward") for name in sys.modules)
    fine = dragon.test_rewards(mine, "m", ["hi"], n=1, backend=Scripted())
    outcome: dict[str, Any] = {}

    def dry_run() -> None:
        start = time.monotonic()
        try:
            dragon.test_rewards(mine, "m", ["hi"], n=2, backend=Scripted())
            outcome["message"] = "no error"
        except RewardError as e:
            outcome["message"] = f"{type(e).__name__}: {e}"
        outcome["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=dry_run, daemon=True)
    thread.start()
    ticks = 0
    while thread.is_alive():
        time.sleep(0.05)
        ticks += 1
    return {"imported_here": imported_here, "fine": list(fine["mine"]), "ticks": ticks,
            "imported_after": any(n.startswith("dragonfarm_custom_reward") for n in sys.modules),
            **outcome}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
