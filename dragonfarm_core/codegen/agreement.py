"""The Python of a judge checked against the person's feedback, as the Evaluate tab shows it:

agreement_code({"provider": "anthropic", "model": "claude-opus-5"}, "/home/me/dragonfarm_runs")
"""

from __future__ import annotations

import os
from typing import Any

from dragonfarm_core.codegen.run import llm_call
from dragonfarm_core.data.codegen import literal, runs_dir_argument


def agreement_code(
    judge: dict[str, Any],
    runs_dir: str | os.PathLike[str],
    rubric: str | None = None,
    run: str | None = None,
    n: int | None = None,
) -> str:
    """`dragon.judge_agreement(judge, ...)` with the judge `judge` (`LLM.describe()`) names,
    through `llm_call`: a key typed in the app is only said to be needed, never written."""
    lines = ["import dragonfarm_core as dragon", ""]
    if judge.get("api_key"):
        variable = "ANTHROPIC_API_KEY" if judge.get("provider") == "anthropic" else "JUDGE_API_KEY"
        lines.append(f"# The key typed in the app is not shown: set {variable} to it.")
        if judge.get("provider") == "openai":
            judge = {**judge, "api_key_env": variable}
    lines.append(f"judge = {llm_call(judge, judge=True)}")
    arguments = ["judge", runs_dir_argument(runs_dir)]
    arguments += [f"run={literal(run)}" if run else None, f"n={n}" if n else None]
    arguments.append(f"rubric={literal(rubric)}" if rubric else None)
    call = ", ".join(a for a in arguments if a)
    return "\n".join([
        *lines,
        f"agreement = dragon.judge_agreement({call})",
        "print(agreement)  # accuracy, kappa with its 95 % interval, position bias, the warning",
        "print(agreement.disagreements)  # the cases where the judge and you differ",
        "",
    ])  # fmt: skip
