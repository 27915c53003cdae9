"""python bench/sweep.py [--runs-dir DIR] [--lrs 5e-4,1e-3,2.5e-3,5e-3,1e-2] [--ranks 8,16]

Does a sweep pay? On the bundled model and the example tickets (SFT, 10 % held out), through
the public API as a user would run it:

- the recommended settings' run (`dragon.recommended`: lr 5e-3, r 16; one epoch here, --epochs
  for more, the same for every run): its held-out loss is the figure to match;
- a grid sweep over learning rate x LoRA rank (10 trials by default, the recommended point among
  them) with Optuna's median pruner (the default: a trial whose held-out loss is worse than the
  median of the completed trials at the same step is cancelled);
- the same grid without pruning, in the same process: every trial trains all its steps.

It prints each trial, then the best held-out loss of each sweep against the recommended run's
(`best_over_recommended`: at most 1.00 means the sweep found settings at least as good), and
the optimizer steps the pruned sweep trained over the full grid's (`steps_saved` = 1 - that
ratio; the target is at least 0.30). Trainers run on one thread (OMP_NUM_THREADS=1), so a busy
and an idle machine train the same numbers. About 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dragonfarm_core as dragon  # noqa: E402

MODEL = "dragonfarm/tiny-support"
PROMPT = "{subject}\n\n{body}"
CPU = dragon.Hardware(device="cpu")


def _steps(run: dragon.Run) -> int:
    return int(run.status().get("step") or 0)


def _sweep(spec: dragon.RunSpec, space: dict[str, Any], prune: bool, runs_dir: Path,
           name: str) -> dict[str, Any]:  # fmt: skip
    started = time.perf_counter()
    s = dragon.sweep(spec, space, prune=prune, runs_dir=runs_dir, name=name, wait=True)
    record = s.status()
    if record["status"] != "succeeded":
        raise SystemExit(f"sweep {s.id} {record['status']}: {record.get('error')}")
    trials = s.trials
    steps = [_steps(dragon.open_run(d)) for d in trials["run_dir"]]
    trials["steps"] = steps
    print(f"\n{name} ({'pruned' if prune else 'no pruning'}), "
          f"{time.perf_counter() - started:.0f} s:")  # fmt: skip
    print(trials.drop(columns=["run_dir", "error", "run", "step"]).to_string(index=False))
    return {"best": float(s.best["value"]), "steps": sum(steps), "trials": len(trials),
            "pruned": int((trials["state"] == "pruned").sum()), "sweep": s}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "bench" / "out" / "sweep")
    parser.add_argument("--lrs", default="5e-4,1e-3,2.5e-3,5e-3,1e-2")
    parser.add_argument("--ranks", default="8,16")
    parser.add_argument("--epochs", type=float, default=1.0,
                        help="every run's epochs (the recommended 3 take three times as long)")  # fmt: skip
    opts = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    ds = dragon.dataset(dragon.example_data()).map(prompt=PROMPT, response="reply").split(0.1)
    fits = dragon.recommended(MODEL, "sft")
    args = dataclass_replace(fits.args, epochs=opts.epochs)
    spec = dragon.RunSpec("sft", ds, MODEL, lora=fits.lora, args=args, hardware=CPU,
                          n_samples=0)  # fmt: skip
    space = {"learning_rate": [float(x) for x in opts.lrs.split(",")],
             "r": [int(x) for x in opts.ranks.split(",")]}  # fmt: skip
    started = time.perf_counter()
    rec = dragon.start(dataclass_replace(spec, name="recommended"), runs_dir=opts.runs_dir)
    rec.wait()
    rec_loss = float(dragon.compare(rec).iloc[0]["eval_loss"])
    print(f"recommended (lr {fits.args.learning_rate:g}, r {fits.lora.r}): held-out loss "
          f"{rec_loss:.4f}, {_steps(rec)} steps, {time.perf_counter() - started:.0f} s")  # fmt: skip
    pruned = _sweep(spec, space, True, opts.runs_dir, "grid-pruned")
    full = _sweep(spec, space, False, opts.runs_dir, "grid-full")
    print(f"\npruned grid: best {pruned['best']:.4f} over {pruned['trials']} trials "
          f"({pruned['pruned']} pruned), {pruned['steps']} steps; full grid: best "
          f"{full['best']:.4f}, {full['steps']} steps; recommended {rec_loss:.4f}")  # fmt: skip
    figures = {
        "trials": pruned["trials"],
        "pruned_trials": pruned["pruned"],
        "best_over_recommended": pruned["best"] / rec_loss,
        "full_best_over_recommended": full["best"] / rec_loss,
        "steps_saved": 1 - pruned["steps"] / full["steps"],
    }
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in figures.items()))  # fmt: skip


def dataclass_replace(value: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(value, **changes)


if __name__ == "__main__":
    main()
