"""The response cache lives where the runs live: synthesize, synthesize_pairs and judge given a
runs dir answer from <runs_dir>/llm_cache/ in a new Python session, with no default runs dir
set (the session's own would be a temp folder, gone at its exit).

Each session is a real second Python process; the teacher, student and judge are the official
`openai` client against a local server on 127.0.0.1 that counts the requests it gets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_fakes import FakeOpenAI

from dragonfarm_core.rundir import files, location
from tests.judging.judge_runs import make_run, sft_row

ROOT = Path(__file__).resolve().parents[2]

SESSION = """
import json, sys
import dragonfarm_core as dragon
from tests.judging.judge_runs import TwoFacedBackend

url, runs, run = sys.argv[1:4]
dragon.set_backend(TwoFacedBackend())  # the run's own replies: no server, no cache
teacher = dragon.llm_openai("teacher", url)
student = dragon.llm_openai("student", url, temperature=1.0)
judge = dragon.judge_openai("judge", url)
asked = ["How do I reset my password?", "Why does my invoice show two charges?"]
synth = dragon.synthesize(asked, teacher, judge=judge, min_score=5, runs_dir=runs)
pairs = dragon.synthesize_pairs(["q3"], student, judge=judge, teacher=teacher, runs_dir=runs)
judged = dragon.judge(run, judge=judge, n=2, progress=False)
print(json.dumps({"kept": len(synth), "pairs": len(pairs), "judged": judged.summary["n"],
                  "runs_dir": str(dragon.runs_dir())}))
"""


class ModelAwareOpenAI(FakeOpenAI):
    """Answers by model: teacher and student say who they are, the judge scores the teacher's
    replies 9 and the student's 3 (so every synthesis keeps its rows)."""

    def prompt_of(self, body: dict) -> str:
        return f"{body['model']}|{super().prompt_of(body)}"


def answer(prompt: str) -> dict:
    model, text = prompt.split("|", 1)
    if model != "judge":
        return {"text": f"{model} says: {text}"}
    score = 9 if "teacher says" in text or "tuned:" in text else 3
    return {"text": json.dumps({"score": score, "rationale": "r"})}


def session(url: str, runs: Path, run: Path) -> dict:
    """One new Python session: no runs dir setting from the environment, no Anthropic key."""
    dropped = (location.ENV_VAR, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "llm")])
    done = subprocess.run(
        [sys.executable, "-c", SESSION, url, str(runs), str(run)],
        capture_output=True, text=True, env=env, timeout=180, cwd=runs.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_session_with_the_same_runs_dir_asks_nothing_again(tmp_path):
    runs = tmp_path / "my-runs"
    run = make_run(runs, "tuned", [sft_row(i) for i in range(2)])
    with ModelAwareOpenAI(answer=answer) as server:
        first = session(server.url, runs, run.dir)
        paid = len(server.requests)
        second = session(server.url, runs, run.dir)
        again = len(server.requests) - paid
    # teacher 2 + judge 2 (synthesize), teacher 1 + student 1 + judge 2 (pairs), judge 2.
    assert paid == 10 and again == 0
    made = [(s["kept"], s["pairs"], s["judged"]) for s in (first, second)]
    assert made == [(2, 1, 2), (2, 1, 2)]
    # Each session's default was its own temp folder (gone now): the answers live in runs/.
    assert first["runs_dir"] != second["runs_dir"] and Path(first["runs_dir"]) != runs
    assert not Path(first["runs_dir"]).exists()
    cached = list((runs / files.LLM_CACHE_DIR).rglob("*.json"))
    assert len(cached) == paid
