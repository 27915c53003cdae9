"""python bench/outcomes.py [--stages sft,dpo,grpo,judged] [--runs-dir DIR] [--seed 42]

Does post-training work? Four stages on the bundled model and the example tickets, each
through the public API exactly as a user would run it, each measured on held-out rows:

- sft: train on the tickets; held-out loss before (step 0: the untrained adapter) and after,
  and how many greedy held-out replies follow the tickets' house style
  (HOUSE_STYLE_PATTERN) for the base model and for the trained run.
- dpo: pairs built from the tickets (chosen: the house-style reply; rejected: a rambling reply
  with the same advice); held-out preference accuracy at the start (policy = reference: every pair a tie,
  which counts as not preferred, so 0) and at the end.
- grpo: replies must open by citing a ticket id like T-1234 (two regex rewards: 0.3 for any
  T-<digits>, 0.7 for a four-digit id); mean held-out reward of greedy replies before (adapter
  off) and after.
- judged: no labels: the SFT run's own samples ranked by a deterministic house-style judge
  (`house_judge`, a plain function) into pairs (`synthesize_pairs`), DPO from the SFT run on
  them (`prefer`), then `judge(dpo, against=sft)` with the same judge on the held-out tickets:
  wins, ties and losses, and the mean house-style score of each run's greedy replies.
  The samples are seeded (`--seed`, 42), so one machine repeats a run. With the defaults
  (SFT 6 epochs; all 180 training prompts x 4 samples at temperature 0.4; DPO lr 5e-4, 2
  epochs) DPO wins more than it loses on every seed measured: 8W 8T 4L (seed 42), 10W 8T 2L
  (1), 9W 8T 3L (2), 12W 6T 2L (3); see `judged` for what did not hold.

Each stage prints its before/after; the last line holds the key figures as key=value pairs,
for example `sft_loss_drop=0.41 sft_style=0.92 dpo_pref_acc=0.86 grpo_reward=0.71`.
Minutes on a laptop CPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dragonfarm_core as dragon  # noqa: E402
from dragonfarm_core.data.example import HOUSE_STYLE_PATTERN  # noqa: E402
from dragonfarm_core.rundir import files  # noqa: E402

MODEL = "dragonfarm/tiny-support"
PROMPT = "{subject}\n\n{body}"
CPU = dragon.Hardware(device="cpu")


HOUSE_STYLE = dragon.metric_regex(HOUSE_STYLE_PATTERN, ignore_case=False)


def style_rate(replies: list[str]) -> float:
    return sum(HOUSE_STYLE(r, "", "") for r in replies) / len(replies)


def sft(runs_dir: Path, epochs: int = 15) -> dict[str, Any]:
    ds = dragon.dataset(dragon.example_data()).map(prompt=PROMPT, response="reply").split(0.1)
    held_out = [r["messages"][-2]["content"] for r in ds.split_records()[1]]
    base_replies = dragon.generate(MODEL, held_out, temperature=0, max_new_tokens=256)
    run = dragon.train(
        ds,
        MODEL,
        lora=dragon.Lora(r=16, alpha=32),
        args=dragon.TrainArgs(
            epochs=epochs,
            learning_rate=5e-3,
            batch_size=4,
            grad_accum=1,
            max_seq_len=384,
            logging_steps=20,
        ),
        hardware=CPU,
        runs_dir=runs_dir,
        n_samples=len(held_out),
        name="outcomes-sft",
        wait=True,
    )
    result = dragon.evaluate(
        run,
        n_samples=len(held_out),
        metrics={"style": HOUSE_STYLE},
    )
    ev = files.read_eval(run.dir)
    before, after = ev["start_eval_loss"], ev["eval_loss"]
    out = {
        "run": run,
        "held_out": len(held_out),
        "loss_before": before,
        "loss_after": after,
        "loss_drop": 1 - after / before,
        "style_base": style_rate(base_replies),
        "style": result.metrics["style"],
    }
    print(
        f"SFT ({len(held_out)} held-out tickets): loss {before:.3f} -> {after:.3f} "
        f"({out['loss_drop']:.0%} lower); house style {out['style_base']:.0%} (base) -> "
        f"{out['style']:.0%} (trained)",
        flush=True,
    )
    return out


def rambling(reply: str) -> str:
    """The same advice as a house-style reply, told as one rambling paragraph."""
    steps = [m.group(1).rstrip(".") for m in re.finditer(r"^\d\. (.+)$", reply, re.M)]
    advice = ", and then maybe ".join(s[0].lower() + s[1:] for s in steps)
    return (
        "ok so this kind of thing happens sometimes and honestly it could be a few things, "
        f"hard to say, but you could {advice}, or something like that. let us know i guess"
    )


def dpo(runs_dir: Path, epochs: int = 1) -> dict[str, Any]:
    tickets = pd.read_csv(dragon.example_data())
    tickets["rambling"] = [rambling(r) for r in tickets.reply]
    pairs = (
        dragon.dataset(tickets, name="ticket-pairs")
        .map_pairs(prompt=PROMPT, chosen="reply", rejected="rambling")
        .split(0.1)
    )
    run = dragon.prefer(
        pairs,
        MODEL,
        method="dpo",
        beta=0.1,
        args=dragon.TrainArgs(
            epochs=epochs,
            learning_rate=5e-4,
            batch_size=4,
            grad_accum=1,
            max_seq_len=384,
            logging_steps=5,
        ),
        hardware=CPU,
        runs_dir=runs_dir,
        n_samples=2,
        name="outcomes-dpo",
        wait=True,
    )
    progress = run.progress()
    before = float(progress["pref_acc"].dropna().iloc[0])
    ev = files.read_eval(run.dir)
    out = {"run": run, "pairs": ev["eval_pairs"], "before": before, "after": ev["pref_accuracy"]}
    print(
        f"DPO ({ev['eval_pairs']} held-out pairs): preference accuracy {before:.2f} -> "
        f"{ev['pref_accuracy']:.2f}, reward margin {ev['reward_margin']:.2f}",
        flush=True,
    )
    return out


def grpo(runs_dir: Path, steps: int = 60) -> dict[str, Any]:
    prompts = dragon.dataset(dragon.example_data()).map_prompts(prompt=PROMPT).split(0.1)
    # Any "T-<digits>" earns a little; a well-formed four-digit id earns the rest.
    rewards = [
        dragon.reward("regex", pattern=r"\bT-\d+", name="cites_ticket", weight=0.3),
        dragon.reward("regex", pattern=r"\bT-\d{4}\b", name="four_digit_id", weight=0.7),
    ]
    run = dragon.reinforce(
        prompts,
        MODEL,
        rewards=rewards,
        group_size=8,
        beta=0.04,
        max_new_tokens=12,
        args=dragon.TrainArgs(
            epochs=2,
            learning_rate=2e-3,
            batch_size=4,
            grad_accum=1,
            max_seq_len=160,
            max_steps=steps,
            logging_steps=5,
        ),
        hardware=CPU,
        runs_dir=runs_dir,
        n_samples=4,
        name="outcomes-grpo",
        wait=True,
    )
    ev = files.read_eval(run.dir)
    out = {
        "run": run,
        "prompts": ev["eval_prompts"],
        "before": ev["start_reward"],
        "after": ev["reward"],
    }
    print(
        f"GRPO ({ev['eval_prompts']} held-out prompts): mean reward {ev['start_reward']:.2f} "
        f"-> {ev['reward']:.2f}",
        flush=True,
    )
    return out


# The house style's parts, each worth points; the whole shape (HOUSE_STYLE_PATTERN) two more.
STYLE_PARTS = [
    (re.compile(r"\AHi [^\s,]+,\n\n"), 1),
    (re.compile(r"Thanks for reaching out about your "), 1),
    (re.compile(r"^1\. \S", re.M), 1),
    (re.compile(r"^2\. \S", re.M), 1),
    (re.compile(r"^3\. \S", re.M), 1),
    (re.compile(r"Best regards,\nThe Dragonfarm Support Team\s*\Z"), 2),
    (re.compile(HOUSE_STYLE_PATTERN), 2),
]


def house_style_score(reply: str | None) -> int:
    """1 (none of the house style) to 10 (all of it, in its exact shape)."""
    text = (reply or "").strip()
    return 1 + sum(points for pattern, points in STYLE_PARTS if pattern.search(text))


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def house_judge(questions: list[str]) -> list[dict[str, Any]]:
    """A deterministic judge (a plain function, as `judge=` takes one): it reads the reply, or
    the two replies, out of each question (judging's templates) and answers as JSON would:
    a score by `house_style_score`, or the reply that scores higher (a tie when equal)."""
    answers: list[dict[str, Any]] = []
    for q in questions:
        if "[Reply A]\n" in q:
            a = house_style_score(_between(q, "[Reply A]\n", "\n\n[Reply B]\n"))
            b = house_style_score(_between(q, "[Reply B]\n", "\n\nAnswer with a JSON"))
            winner = "A" if a > b else "B" if b > a else "tie"
            answers.append({"winner": winner, "rationale": f"house style {a} vs {b}"})
        else:
            score = house_style_score(_between(q, "[Assistant's reply]\n", "\n\nAnswer with"))
            answers.append({"score": score, "rationale": "house style"})
    return answers


def judged(
    runs_dir: Path,
    sft_epochs: int = 6,
    n_prompts: int = 180,
    n_samples: int = 4,
    epochs: int = 2,
    learning_rate: float = 5e-4,
    temperature: float = 0.4,
    seed: int = 42,
    start: Any = None,
) -> dict[str, Any]:
    """The loop with no labels: an SFT run samples its own replies, the house-style judge ranks
    them into pairs (synthesize_pairs), DPO continues from the SFT run on those pairs (prefer),
    and the same judge compares the two runs' greedy replies on the held-out tickets (judge).
    `seed` seeds the samples (training keeps its own seed, 42), so a rerun gives the same pairs;
    `start`: an SFT run already made (None: one trained for `sft_epochs`), to try other seeds.
    All 20 held-out tickets (10 % of 200) are judged; there are no more to judge.

    What decides it is how close the samples are to the replies the model gives greedily, since
    the judge compares greedy replies. After 6 SFT epochs the greedy replies score 7.8 of 10
    (30 % in the exact house style), but its samples at temperature 0.7 fall apart: of 180
    prompts 56 gave a pair, and in all but two of them the best of four scored 5 or 6, so the
    pairs (mostly 6 vs 4) taught nothing the greedy replies lacked. At 0.4 the samples stay
    near the greedy replies and differ where it counts: 157-162 pairs from 180 prompts, the
    best of four in the exact house style (10) in two thirds of them. From one SFT run (6
    epochs) on a quiet 2-core CPU, DPO lr 5e-4 for 2 epochs (72-74 steps, about 3 min;
    sampling about 2.5 min):

        seed  pairs  DPO vs SFT    greedy house style
        42    160    8W  8T 4L     7.8 -> 8.3
        1     157    10W 8T 2L     7.8 -> 9.1
        2     162    9W  8T 3L     7.8 -> 8.7
        3     159    12W 6T 2L     7.8 -> 9.55

    The settings were chosen on seed 1 and then run unchanged on 42, 2 and 3. On seed 1's
    pairs lr 2e-3 did a little worse (9W 7T 4L, 8.5).

    What did not hold, for the record (SFT 3 epochs, greedy replies 5.5 of 10, samples at
    0.7): their best sample scored 5 or 6, so DPO had no better reply to move towards and more
    of it only made the replies worse. On seed 1 (82 pairs from 180 prompts): lr 2e-3 for 2
    epochs 5W 9T 6L (5.5 -> 5.45), 4 epochs 4W 12T 4L, lr 5e-3 2W 5T 13L (-> 4.75), lr 5e-3
    with beta 0.5 6W 3T 11L. Earlier sessions, from 64 prompts, tried lr 5e-4 and 2e-3, 2 to 4
    DPO epochs, SFT of 3 to 8 epochs, 8 samples a prompt and ORPO: no setting won on every
    seed (at best 8W 1L on one seed, 5W 8L on another)."""
    if start is None:
        start = sft(runs_dir, epochs=sft_epochs)["run"]
    pairs = dragon.synthesize_pairs(
        dragon.prompts(start, "train", n=n_prompts),
        start,
        judge=house_judge,
        n_samples=n_samples,
        temperature=temperature,
        max_new_tokens=256,
        seed=seed,
        runs_dir=runs_dir,
    )
    made = pairs.synthesis
    run = dragon.prefer(
        pairs.split(0.1),
        start,
        method="dpo",
        beta=0.1,
        args=dragon.TrainArgs(
            epochs=epochs,
            learning_rate=learning_rate,
            batch_size=4,
            grad_accum=1,
            max_seq_len=384,
            logging_steps=5,
        ),
        hardware=CPU,
        runs_dir=runs_dir,
        n_samples=2,
        name=f"outcomes-judged-dpo-{seed}",
        wait=True,
    )
    return _verdict(run, start, made, n_samples, seed)


def _verdict(run: Any, start: Any, made: dict[str, Any], n_samples: int, seed: int) -> dict:
    held_out = dragon.prompts(start, "eval")
    verdict = dragon.judge(
        run, against=start, prompts=held_out, n=len(held_out), judge=house_judge,
        max_new_tokens=256, progress=False,
    )  # fmt: skip
    s, details = verdict.summary, verdict.details
    out = {
        "run": run,
        "seed": seed,
        "pairs": made["kept"],
        "prompts": made["in"],
        "wins": s["wins"],
        "ties": s["ties"],
        "losses": s["losses"],
        "position_bias": s["position_bias"],
        "style_before": sum(map(house_style_score, details["against_reply"])) / len(details),
        "style_after": sum(map(house_style_score, details["reply"])) / len(details),
    }
    print(
        f"Judged pairs (seed {seed}): {made['kept']} pairs from {made['in']} prompts x "
        f"{n_samples} samples (dropped "
        f"{', '.join(f'{n} {k}' for k, n in made['dropped'].items() if n) or 'none'}); "
        f"DPO vs SFT on {s['n']} held-out tickets: {s['wins']}W {s['ties']}T {s['losses']}L; "
        f"house-style score {out['style_before']:.1f} -> {out['style_after']:.1f} (of 10)",
        flush=True,
    )
    return out


STAGES = {"sft": sft, "dpo": dpo, "grpo": grpo, "judged": judged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", default="sft,dpo,grpo,judged")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "bench" / "out" / "outcomes")
    parser.add_argument("--seed", type=int, default=42, help="the judged stage's sample seed")
    parser.add_argument(
        "--judged-lr", type=float, default=5e-4, help="learning rate of the judged DPO run"
    )
    parser.add_argument("--judged-epochs", type=int, default=2, help="epochs of the judged DPO run")
    parser.add_argument("--judged-prompts", type=int, default=180, help="prompts sampled for pairs")
    parser.add_argument(
        "--judged-temperature", type=float, default=0.4, help="the judged samples' temperature"
    )
    opts = parser.parse_args()
    figures: dict[str, float] = {}
    for stage in opts.stages.split(","):
        started = time.perf_counter()
        seeded = {"seed": opts.seed, "learning_rate": opts.judged_lr, "epochs": opts.judged_epochs,
                  "n_prompts": opts.judged_prompts, "temperature": opts.judged_temperature,
                  } if stage == "judged" else {}  # fmt: skip
        out = STAGES[stage](opts.runs_dir, **seeded)
        print(f"  {stage}: {time.perf_counter() - started:.0f} s, run {out['run'].dir}", flush=True)
        if stage == "sft":
            figures |= {"sft_loss_drop": out["loss_drop"], "sft_style_base": out["style_base"],
                        "sft_style": out["style"]}  # fmt: skip
        elif stage == "dpo":
            figures |= {"dpo_pref_acc_start": out["before"], "dpo_pref_acc": out["after"]}
        elif stage == "judged":
            figures |= {"judged_wins": out["wins"], "judged_ties": out["ties"],
                        "judged_losses": out["losses"], "judged_style_sft": out["style_before"],
                        "judged_style_dpo": out["style_after"]}  # fmt: skip
        else:
            figures |= {"grpo_reward_start": out["before"], "grpo_reward": out["after"]}
    dragon.worker_stop()
    print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
