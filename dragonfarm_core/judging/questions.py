"""What a judge is asked, and how its answers are read.

    question = score_prompt("How do I reset it?", reply, rubric="Concrete next steps.")
    value, rationale, failure = read_score('{"score": 8, "rationale": "Clear."}')  # 8.0, ...
    pick, rationale, failure = read_pick({"winner": "A", "rationale": "..."})      # "A", ...

Answers are JSON: `{"score": 1-10, "rationale": ...}` or `{"winner": "A"|"B"|"tie",
"rationale": ...}`, as text, a `Reply` or an already parsed dict. One that is not usable reads
as a failure ("unparsed", "judge refusal", "judge empty", "judge error: ..."): never guessed.
"""

from __future__ import annotations

import math
from typing import Any

from dragonfarm_core.llm import Reply, parse_json_answer

SCORE_RANGE = (1.0, 10.0)

DEFAULT_RUBRIC = (
    "Does the reply do what the user asked, correctly and on topic? Is it clear, concise and "
    "helpful, with concrete next steps where they fit?"
)

SCORE_TEMPLATE = """Rate the assistant's reply to the user's message from 1 (worst) to 10 (best).

Criteria: {rubric}
{context}
[User message]
{prompt}
{reference}
[Assistant's reply]
{reply}

Answer with a JSON object only: {{"score": <a whole number from 1 to 10>, "rationale": "<one or \
two sentences>"}}"""

PAIR_TEMPLATE = """Which of the two assistant replies answers the user's message better?

Criteria: {rubric}
{context}
[User message]
{prompt}
{reference}
[Reply A]
{first}

[Reply B]
{second}

Answer with a JSON object only: {{"winner": "A" or "B" (or "tie" only when they are equally \
good), "rationale": "<one or two sentences>"}}"""

REASK = (
    "\n\nYour previous answer could not be read. Answer with the JSON object only, exactly in "
    "the shape asked for, with no other text."
)


def _block(title: str, text: str | None) -> str:
    return f"\n[{title}]\n{text}\n" if text else ""


def score_prompt(
    prompt: str,
    reply: str,
    rubric: str | None = None,
    reference: str | None = None,
    system: str | None = None,
) -> str:
    """What the judge is asked to score one reply."""
    return SCORE_TEMPLATE.format(
        rubric=rubric or DEFAULT_RUBRIC,
        context=_block("System prompt the assistant was given", system),
        prompt=prompt,
        reference=_block("Reference answer (take it as ground truth)", reference),
        reply=reply,
    )


def pair_prompt(
    prompt: str,
    first: str,
    second: str,
    rubric: str | None = None,
    reference: str | None = None,
    system: str | None = None,
) -> str:
    """What the judge is asked to compare two replies (A shown first)."""
    return PAIR_TEMPLATE.format(
        rubric=rubric or DEFAULT_RUBRIC,
        context=_block("System prompt the assistants were given", system),
        prompt=prompt,
        reference=_block("Reference answer (take it as ground truth)", reference),
        first=first,
        second=second,
    )


def _answer_data(answer: Any) -> tuple[Any, str | None]:
    """(parsed JSON, None), or (None, why the answer is unusable)."""
    if isinstance(answer, Reply):
        if answer.refusal:
            return None, "judge refusal"
        if answer.error:
            return None, f"judge error: {answer.error}"
        if answer.empty or not answer.text.strip():
            return None, "judge empty"
        if answer.data is not None:
            return answer.data, None
        if answer.parse_error:
            return None, "unparsed"
        answer = answer.text
    if isinstance(answer, dict):
        return answer, None
    if not isinstance(answer, str):
        return None, "unparsed"
    if not answer.strip():
        return None, "judge empty"
    try:
        return parse_json_answer(answer), None
    except ValueError:
        return None, "unparsed"


def read_score(answer: Any) -> tuple[float | None, str, str | None]:
    data, failure = _answer_data(answer)
    if failure:
        return None, "", failure
    if not isinstance(data, dict):
        return None, "", "unparsed"
    value, rationale = data.get("score"), _rationale(data)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, rationale, "unparsed"
    value = float(value)
    if not math.isfinite(value) or not SCORE_RANGE[0] <= value <= SCORE_RANGE[1]:
        return None, rationale, "unparsed"
    return value, rationale, None


def read_pick(answer: Any) -> tuple[str | None, str, str | None]:
    data, failure = _answer_data(answer)
    if failure:
        return None, "", failure
    if not isinstance(data, dict):
        return None, "", "unparsed"
    pick = data.get("winner")
    pick = pick.strip().upper() if isinstance(pick, str) else None
    if pick == "TIE":
        pick = "tie"
    if pick not in ("A", "B", "tie"):
        return None, _rationale(data), "unparsed"
    return pick, _rationale(data), None


def _rationale(data: dict[str, Any]) -> str:
    value = data.get("rationale")
    return "" if value is None else str(value)
