"""The training methods, as one plain table: what each trains on, what runs it, what it writes.

    METHODS["dpo"].mapping_kinds     # ('pairs',)
    METHODS["grpo"].trainer          # 'dragonfarm_core.trainers.grpo'

Every fact about a method lives in its row: the run writer checks the dataset's mapping against
it, the trainer entry point imports its module, `code(run)` and the Train tab call its public
function with its defaults and its own settings group, and the Monitor draws its curves. A new
method is a new row, its trainer module and their tests. Rows are data, not behaviour; the
module needs only the settings dataclasses and the rewards (no pandas, no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

from dragonfarm_core.method_args import DpoArgs, GrpoArgs, PreferenceArgs
from dragonfarm_core.settings import TrainArgs

# The columns every trainer writes to progress.jsonl (a method's own columns come after them).
PROGRESS_COLUMNS = ("step", "epoch", "loss", "eval_loss", "lr", "grad_norm", "elapsed_s", "eta_s")
# In `Method.curves`: one column per reward of a GRPO run (reward_<name>), in the order written.
EACH_REWARD = "reward_*"


@dataclass(frozen=True)
class Method:
    """One row of the table."""

    name: str  # config.json's `method`
    label: str  # the Train tab's choice
    function: str  # the public function that starts it: dragon.<function>(...)
    mapping_kinds: tuple[str, ...]  # the Dataset mapping kinds it trains on
    mapping_hint: str  # how to map a dataset for it
    data_kind: str  # config.json's data.kind: the rows of train.jsonl and eval.jsonl
    trainer: str  # the module whose main(run_dir) trains a run
    default_args: TrainArgs  # the manual's TrainArgs defaults for its function
    settings: type[PreferenceArgs] | type[GrpoArgs] | None  # its group (method_args), if any
    curves: tuple[tuple[str, ...], ...]  # progress.jsonl columns it draws, one tuple per panel
    metrics: tuple[str, ...]  # the eval.json results its trainer writes
    recomputable: bool  # whether dragon.evaluate(run, recompute=True) can score it again


PAIRS_HINT = ".map_pairs(prompt=..., chosen=..., rejected=...)"
PREFERENCE_ARGS = TrainArgs(learning_rate=5e-5, epochs=2)  # gentler than SFT, two epochs
PREFERENCE_CURVES = (
    ("loss", "eval_loss"),
    ("pref_acc", "eval_pref_acc"),
    ("reward_margin", "eval_reward_margin"),
    ("lr",),
)
PREFERENCE_METRICS = ("pref_accuracy", "reward_margin", "eval_pairs", "eval_loss")


def _preference(name: str, label: str, settings: type[PreferenceArgs]) -> Method:
    return Method(
        name, label, "prefer", ("pairs",), PAIRS_HINT, "pairs", f"dragonfarm_core.trainers.{name}",
        PREFERENCE_ARGS, settings, PREFERENCE_CURVES, PREFERENCE_METRICS, True,
    )  # fmt: skip


METHODS: dict[str, Method] = {
    "sft": Method(
        name="sft",
        label="SFT: learn the mapped replies (supervised fine-tuning)",
        function="train",
        mapping_kinds=("sft", "conversations"),
        mapping_hint=".map(prompt=..., response=...) or dragon.conversations()",
        data_kind="messages",
        trainer="dragonfarm_core.trainers.sft",
        default_args=TrainArgs(),
        settings=None,
        curves=(("loss", "eval_loss"), ("lr",)),
        metrics=("eval_loss", "perplexity", "eval_tokens"),
        recomputable=True,
    ),
    "dpo": _preference("dpo", "DPO: prefer the chosen reply to the rejected one", DpoArgs),
    "orpo": _preference(
        "orpo",
        "ORPO: learn the chosen reply, move away from the rejected one (no reference)",
        PreferenceArgs,
    ),
    "grpo": Method(
        name="grpo",
        label="GRPO: practise on prompts, learn from verifiable rewards",
        function="reinforce",
        mapping_kinds=("prompts",),
        mapping_hint=".map_prompts(prompt=..., reference=...)",
        data_kind="prompts",
        trainer="dragonfarm_core.trainers.grpo",
        # A small learning rate, one pass, a checkpoint every 20 steps.
        default_args=TrainArgs(
            learning_rate=1e-5, epochs=1, batch_size=4, grad_accum=1, save_steps=20
        ),
        settings=GrpoArgs,
        curves=(("reward", EACH_REWARD), ("kl",), ("loss",), ("lr",)),
        metrics=("reward", EACH_REWARD, "eval_prompts"),
        recomputable=False,
    ),
}


def method(name: str) -> Method:
    """The row of `name`; an unknown method raises ValueError listing the known ones."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"method={name!r} is not one of {', '.join(METHODS)}.") from None
