"""Deterministic judges for the pipeline tests: as Python functions (foreground) and as the
answers of a local OpenAI-compatible server (a background pipeline's job rebuilds its judge
from a description, so it must be one it can reach)."""

from __future__ import annotations

import json
import re

from tests.judging.judge_runs import reply_of as pairwise_reply


def scored_reply(question: str) -> str:
    """The reply a rubric question asks about (judging.SCORE_TEMPLATE)."""
    return question.split("[Assistant's reply]\n", 1)[1].split("\n\nAnswer with a JSON", 1)[0]


def first_sample_best(question: str) -> str:
    """Rubric: a stand-in backend's first sample ("... #1") scores 9, the others 2. Pairwise:
    the tuned model's reply wins."""
    if "[Reply A]" in question:
        a = pairwise_reply(question, "Reply A")
        return json.dumps({"winner": "A" if a.startswith("tuned") else "B", "rationale": "r"})
    score = 9 if re.search(r"#1$", scored_reply(question).strip()) else 2
    return json.dumps({"score": score, "rationale": "r"})


def longer_is_better(question: str) -> str:
    """For real replies: rubric score grows with the reply's length; pairwise, the longer wins."""
    if "[Reply A]" in question:
        a, b = (len(pairwise_reply(question, label)) for label in ("Reply A", "Reply B"))
        return json.dumps({"winner": "A" if a > b else "B" if b > a else "tie", "rationale": "r"})
    return json.dumps({"score": min(10, 1 + len(scored_reply(question)) // 8), "rationale": "r"})


def as_function(rule):
    def judge(questions: list[str]) -> list[str]:
        return [rule(q) for q in questions]

    return judge
