"""The preflight memory estimate against measured peaks: short real trainings (2 steps, no
samples) on the bundled model and on a SmolLM2-135M-shaped model (its real config, random
weights: bench/decode.py builds it), each in its own trainer process, whose peak RSS the
trainer writes into status.json (peak_memory_mib). Prints estimate, measured and the error per
setting; the last line: key=value with the largest and the mean absolute error.

    python bench/preflight.py [--quick] [--only N ...]   # --quick: the bundled model only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import dragonfarm_core as dragon  # noqa: E402
from dragonfarm_core import memory_estimate as preflight  # noqa: E402
from dragonfarm_core.models import bundled_model_path  # noqa: E402

# (model, batch_size, max_seq_len, gradient_checkpointing, LoRA r, rows repeated to length)
SETTINGS = [
    ("bundled", 4, 384, False, 16, 1),
    ("bundled", 8, 1024, False, 16, 4),
    ("smol-135m", 2, 256, False, 16, 1),
    ("smol-135m", 4, 512, False, 16, 3),
    ("smol-135m", 4, 512, True, 16, 3),
    ("bundled", 8, 1024, True, 16, 4),
]


def dataset(repeat: int) -> dragon.Dataset:
    """The example tickets, each reply repeated `repeat` times (longer rows, longer batches)."""
    base = dragon.dataset(dragon.example_data()).frame.copy()
    base["reply"] = [("\n\n".join([r] * repeat)) for r in base["reply"]]
    return dragon.dataset(base, name=f"tickets-x{repeat}").map(
        prompt="{subject}\n\n{body}", response="reply"
    )


def model_folder(name: str) -> str:
    if name == "bundled":
        return str(bundled_model_path())
    from decode import smol_model  # the 135M shape, built once under bench/out/

    return str(smol_model())


def measure(setting: tuple, runs: Path) -> tuple[float, float]:
    model, batch, seq, checkpointing, r, repeat = setting
    args = dragon.TrainArgs(batch_size=batch, grad_accum=1, max_seq_len=seq, max_steps=2,
                            gradient_checkpointing=checkpointing, learning_rate=1e-4)  # fmt: skip
    spec = dragon.RunSpec("sft", dataset(repeat), model_folder(model), lora=dragon.Lora(r=r),
                          args=args, n_samples=0)  # fmt: skip
    est = preflight.preflight(spec)
    assert est is not None
    run = dragon.start(spec, runs_dir=runs, wait=True)
    status = run.status()
    if status.get("state") != "succeeded":
        raise SystemExit(f"{run.path.name} {status.get('state')}: {status.get('error')}")
    return est.peak_mib, float(status["peak_memory_mib"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the bundled model only")
    parser.add_argument("--only", type=int, nargs="*", help="these settings (0-based) only")
    opts = parser.parse_args()
    chosen = [s for i, s in enumerate(SETTINGS) if (not opts.quick or s[0] == "bundled")
              and (opts.only is None or i in opts.only)]  # fmt: skip
    errors = []
    print(
        f"{'model':<11}{'batch':>6}{'seq':>6}{'ckpt':>6}{'estimate':>11}{'measured':>11}{'error':>8}"
    )
    with tempfile.TemporaryDirectory(prefix="preflight-bench-") as runs:
        for setting in chosen:
            est, got = measure(setting, Path(runs))
            errors.append((est - got) / got)
            model, batch, seq, checkpointing = setting[:4]
            print(f"{model:<11}{batch:>6}{seq:>6}{checkpointing!s:>6}{est:>8.0f} MiB"
                  f"{got:>8.0f} MiB{errors[-1]:>+8.0%}", flush=True)  # fmt: skip
    worst = max(errors, key=abs)
    mean = sum(abs(e) for e in errors) / len(errors)
    print(f"settings={len(errors)} worst_error={worst:+.2f} mean_abs_error={mean:.2f}")


if __name__ == "__main__":
    main()
