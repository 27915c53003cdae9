"""What a finished run changed, as the Monitor says it: one sentence on the held-out measure
(loss for SFT, preference accuracy for DPO/ORPO, reward for GRPO) before and after, the
replies to a few held-out prompts from the model the run started from next to the run's own
and the data's, and every final number one click away (a <details> element).

Everything comes from the run's files: eval.json (the trainer writes the start values in it,
or the step-0 row of progress.jsonl holds them) and samples.json (its first rows carry
`before`, the reply with the adapter switched off).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import pandas as pd

FLAT = 0.05  # a change smaller than this share of the start value is "barely changed"


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not pd.isna(value)
    return float(value) if ok else None


NOT_MEASURED = "No held-out loss in eval.json: Evaluate's re-measure writes it."
NO_HELD_OUT = "No held-out loss: the data had no held-out rows (hold some out with .split())."


def loss_sentence(before: float | None, after: float | None, held_out: Any = None) -> str:
    """The held-out loss before and after, in plain words, with what to try when it did not
    help. `held_out`: how many rows were held out (config.json's data.n_eval), if known."""
    if after is None:
        return NO_HELD_OUT if held_out == 0 else NOT_MEASURED
    if before is None or before <= 0:
        return f"Held-out loss at the end: {after:.2f}."
    change = 1 - after / before
    said = f"Held-out loss went from {before:.2f} to {after:.2f}"
    if change >= FLAT:
        return (f"{said}: {change:.0%} lower. The run predicts the held-out replies better "
                "than the model it started from.")  # fmt: skip
    if change > -FLAT:
        return (f"{said}: it barely changed. Try more epochs or a larger learning rate (the "
                "Train tab's recommended settings), or more rows.")  # fmt: skip
    return (f"{said}: {-change:.0%} higher. The run fits its training rows but not the held-out "
            "ones (overfitting): try fewer epochs or a smaller learning rate.")  # fmt: skip


def measure_sentence(
    method: str, results: dict[str, Any], start: dict[str, Any], held_out: Any = None
) -> str:
    """The sentence for `method`: `results` is eval.json, `start` the step-0 progress row,
    `held_out` the number of held-out rows when known."""
    if method == "grpo":
        before, after = _number(results.get("start_reward")), _number(results.get("reward"))
        if after is None:
            return "No held-out prompts, so no held-out reward was measured."
        if before is None:
            return f"Mean reward on the held-out prompts at the end: {after:.2f}."
        return f"Mean reward on the held-out prompts went from {before:.2f} to {after:.2f}."
    if method in ("dpo", "orpo"):
        accuracy = _number(results.get("pref_accuracy"))
        if accuracy is None:
            return "No held-out pairs, so no preference accuracy was measured."
        first = _number(start.get("eval_pref_acc"))
        was = f"from {first:.0%} " if first is not None else ""
        return (f"Held-out preference accuracy {'went ' if was else 'is '}{was}"
                f"{'to ' if was else ''}{accuracy:.0%}: the share of held-out pairs where the "
                "run gives the chosen reply more weight than the rejected one.")  # fmt: skip
    before = _number(results.get("start_eval_loss")) or _number(start.get("eval_loss"))
    return loss_sentence(before, _number(results.get("eval_loss")), held_out)


def before_after_html(samples: Sequence[dict[str, Any]]) -> str:
    """A card per sample that has `before`: the prompt, then the data's reply, the reply
    before this run and the run's reply side by side."""
    cards = []
    for s in samples:
        if "before" not in s:
            continue
        cells = "".join(
            f"<div class='outcome-cell'><b>{label}</b><p>{html.escape(str(s.get(key) or ''))}</p></div>"
            for label, key in (("The data's reply", "reference"), ("Before this run", "before"),
                               ("After", "generated"))
        )  # fmt: skip
        prompt = html.escape(str(s.get("prompt") or ""))
        cards.append(f"<div class='outcome-card'><p class='outcome-prompt'>{prompt}</p>"
                     f"<div class='outcome-row'>{cells}</div></div>")  # fmt: skip
    if not cards:
        return ""
    return "<p><b>Held-out prompts, before and after</b></p>" + "".join(cards)


def numbers_html(metrics: dict[str, Any]) -> str:
    """Every final number, folded away."""
    rows = [(k.replace("_", " "), v) for k, v in metrics.items() if _number(v) is not None]
    if not rows:
        return ""
    items = "".join(f"<li>{html.escape(k)}: {v:.4g}</li>" for k, v in rows)
    return f"<details><summary>All final numbers</summary><ul>{items}</ul></details>"


def outcome_html(
    method: str, results: dict[str, Any], start: dict[str, Any], metrics: dict[str, Any],
    samples: Sequence[dict[str, Any]], held_out: Any = None,
) -> str:  # fmt: skip
    """The Monitor's "what changed" box of a finished run (`held_out`: config's data.n_eval)."""
    sentence = html.escape(measure_sentence(method, results, start, held_out))
    return (f"<div class='run-outcome'><p class='outcome-sentence'>{sentence}</p>"
            f"{before_after_html(samples)}{numbers_html(metrics)}</div>")  # fmt: skip


def start_row(progress: pd.DataFrame) -> dict[str, Any]:
    """progress.jsonl's step-0 row (the held-out measures before training), or {}."""
    if progress.empty or "step" not in progress:
        return {}
    first = progress[progress["step"] == 0]
    return {} if first.empty else dict(first.iloc[0])
