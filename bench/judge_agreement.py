"""python bench/judge_agreement.py [--tickets 60] [--runs-dir DIR]

Can judge_agreement tell a good judge from a bad one? The deterministic house-style judge of
the outcomes bench (`outcomes.house_judge`, a plain function scoring `house_style_score`) is
measured against Chat feedback built from the house-style rule, and against feedback built
from its opposite, on the example tickets and the bundled model's replies to them.

For each of the first `--tickets` tickets there are four replies: the bundled model's own
(greedy, through `dragon.generate`), the ticket's house-style reply, the same advice as one
rambling paragraph (`outcomes.rambling`), and a near miss (the house-style reply without its
sign-off, which scores 6 of 10). The feedback is written through the feedback store
(`record_event`, what Chat's rate and edit call), one kind a ticket in turn:

    ticket % 4 == 0   the house-style and the model's reply to the same message, each rated
    ticket % 4 == 1   an edit: the reply that breaks the rule edited into the one that keeps it
                      (house style vs the near miss)
    ticket % 4 == 2   the house-style and the rambling reply to the same message, each rated
    ticket % 4 == 3   one reply rated on its own: the model's (odd tickets of this kind) or the
                      house-style one (even)

The rule says which reply is liked: "same" likes the reply that matches HOUSE_STYLE_PATTERN,
"opposite" the one that does not. The first three kinds are pairs (the judge is asked twice,
swapped); the last is a rubric case (the judge's score of 6 or more counts as liked).

Prints, for each rule, accuracy (Wilson 95 %), Cohen's kappa (analytic 95 %), position bias
and flip rate; the last line holds the figures as key=value pairs. The issue's target
("agreement >= 0.9 with the same rule, <= 0.1 with the opposite") is checked on both accuracy
and kappa. Seconds on a CPU (the model's replies are most of it).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dragonfarm_core as dragon  # noqa: E402
from bench.outcomes import MODEL, PROMPT, house_judge, rambling  # noqa: E402
from dragonfarm_core.conversation.feedback_store import record_event  # noqa: E402
from dragonfarm_core.data.example import HOUSE_STYLE_PATTERN  # noqa: E402

HOUSE = re.compile(HOUSE_STYLE_PATTERN)
SIGN_OFF = "Best regards,\nThe Dragonfarm Support Team"


def near_miss(reply: str) -> str:
    """The house-style reply with its sign-off swapped for a casual one: close, but not it."""
    return reply.strip().replace(SIGN_OFF, "Cheers,\nSupport")


def replies(n: int) -> pd.DataFrame:
    tickets = pd.read_csv(dragon.example_data()).head(n)
    prompts = [PROMPT.format(subject=s, body=b) for s, b in zip(tickets.subject, tickets.body, strict=True)]  # fmt: skip
    model = dragon.generate(MODEL, prompts, temperature=0, max_new_tokens=160)
    return pd.DataFrame({"prompt": prompts, "house": [r.strip() for r in tickets.reply],
                         "model": [m.strip() for m in model],
                         "rambling": [rambling(r) for r in tickets.reply],
                         "near": [near_miss(r) for r in tickets.reply]})  # fmt: skip


def write_feedback(runs_dir: Path, rows: pd.DataFrame, rule: str) -> dict[str, int]:
    """Events for every ticket (see the module docstring); returns how many of each kind."""

    def liked(text: str) -> bool:
        return bool(HOUSE.search(text)) == (rule == "same")

    def rate(prompt: str, text: str) -> None:
        record_event(runs_dir, kind="rating", messages=[{"role": "user", "content": prompt}],
                     reply=text, verdict="up" if liked(text) else "down", model=MODEL)  # fmt: skip

    counts = {"ratings pair": 0, "edit": 0, "single": 0}
    for i, r in rows.iterrows():
        kind = int(i) % 4
        if kind in (0, 2):
            other = r.model if kind == 0 else r.rambling
            rate(r.prompt, r.house)
            rate(r.prompt, other)
            counts["ratings pair"] += 1
        elif kind == 1:
            better, worse = (r.house, r.near) if liked(r.house) else (r.near, r.house)
            record_event(runs_dir, kind="edit", messages=[{"role": "user", "content": r.prompt}],
                         reply=worse, edited=better, model=MODEL)  # fmt: skip
            counts["edit"] += 1
        else:
            rate(r.prompt, r.model if (int(i) // 4) % 2 else r.house)
            counts["single"] += 1
    return counts


def measure(rows: pd.DataFrame, rule: str, runs_dir: Path) -> dict[str, Any]:
    runs_dir.mkdir(parents=True, exist_ok=True)
    counts = write_feedback(runs_dir, rows, rule)
    started = time.perf_counter()
    a = dragon.judge_agreement(house_judge, runs_dir=runs_dir, cache=False)
    s = a.summary
    ci, kci = s["accuracy_ci95"], s["kappa_ci95"] or [float("nan")] * 2
    print(
        f"rule {rule!r}: {s['judged']} cases ({s['pairwise_n']} pairs, {s['rubric_n']} rated "
        f"alone; events: {counts}); accuracy {s['accuracy']:.3f} (95 % {ci[0]:.3f}-{ci[1]:.3f}, "
        f"Wilson), kappa {s['kappa']:.3f} (95 % {kci[0]:.3f}-{kci[1]:.3f}, analytic), position "
        f"bias {s['position_bias']:.2f} (n={s['position_bias_n']}), flip rate "
        f"{s['flip_rate']:.2f}; {len(a.disagreements)} disagreements; "
        f"{time.perf_counter() - started:.2f} s",
        flush=True,
    )
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=60)
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where the feedback goes (default: a temporary folder)")  # fmt: skip
    opts = parser.parse_args()
    started = time.perf_counter()
    rows = replies(opts.tickets)
    print(f"{len(rows)} tickets; the bundled model's replies in {time.perf_counter() - started:.0f}"
          f" s, {sum(bool(HOUSE.search(m)) for m in rows.model)} in the house style", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        home = opts.runs_dir or Path(tmp)
        same = measure(rows, "same", home / "same")
        opposite = measure(rows, "opposite", home / "opposite")
    met = (min(same["accuracy"], same["kappa"]) >= 0.9
           and max(opposite["accuracy"], opposite["kappa"]) <= 0.1)  # fmt: skip
    print(f"target (same rule >= 0.9, opposite <= 0.1, on accuracy and kappa): "
          f"{'met' if met else 'NOT met'}")  # fmt: skip
    dragon.worker_stop()
    figures = {"same_accuracy": same["accuracy"], "same_kappa": same["kappa"],
               "opposite_accuracy": opposite["accuracy"], "opposite_kappa": opposite["kappa"],
               "position_bias": same["position_bias"], "cases": same["judged"]}  # fmt: skip
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in figures.items()))  # fmt: skip


if __name__ == "__main__":
    main()
