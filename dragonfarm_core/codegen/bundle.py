"""The Python of running a run elsewhere: `bundle(...)`, `remote(...)`, `import_results(...)`.

    bundle_arguments(spec)        # the keywords dragon.bundle takes for what a RunSpec describes
    bundle_code(spec, runs_dir)   # the script the Train tab's "Run elsewhere" runs, as text

The script is written by codegen's own pieces (the dataset line, the call's arguments), so it
reads like the train()/prefer()/reinforce() script of the same spec, with `dragon.bundle` and
an explicit method. Hardware settings are left out: they describe this machine, and on the GPU
machine the trainer's own device and dtype rules decide.
"""

from __future__ import annotations

import os
from typing import Any

from dragonfarm_core.codegen.run import call_arguments, head_lines, write_script
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.method_args import GrpoArgs, PreferenceArgs, ReinforceArgs
from dragonfarm_core.spec import RunSpec


def bundle_arguments(spec: RunSpec) -> dict[str, Any]:
    """dragon.bundle's keywords (besides dataset and model) for the run `spec` describes."""
    out: dict[str, Any] = {
        "method": spec.method, "lora": spec.lora, "args": spec.args, "name": spec.name,
        "n_samples": spec.n_samples, "revision": spec.revision,
        "trust_remote_code": spec.trust_remote_code,
    }  # fmt: skip
    group = spec.method_args
    if isinstance(group, GrpoArgs):
        out |= {"rewards": list(group.rewards), **ReinforceArgs.to_dict(group)}
    elif isinstance(group, PreferenceArgs):
        out |= group.to_dict()  # beta, and DPO's loss_type and label_smoothing
    return out


def bundle_code(
    spec: RunSpec, runs_dir: str | os.PathLike[str] | None = None, provider: str = "colab"
) -> str:
    """The script that bundles the run `spec` describes and shows `provider`'s steps."""
    head, model = head_lines(spec.dataset_dict(), spec.model)
    arguments = [a for a in call_arguments(spec, model, runs_dir) if not a.startswith(
        ("hardware=", "method="))]  # fmt: skip
    arguments.insert(2, f"method={literal(spec.method)}")
    script = write_script(head, "run", "bundle", arguments)
    return script + remote_code(provider)


def remote_code(provider: str) -> str:
    """The lines after a bundle: the provider's steps, and the import once trained."""
    return (
        f"info = dragon.remote(run, {literal(provider)})\n"
        'print(*info["steps"], sep="\\n")\n'
        "# ... train there, download the results zip, then:\n"
        '# dragon.import_results(run, f"dragonfarm-results-{run.id}.zip")\n'
    )


def import_code(run_dir: str | os.PathLike[str], results_name: str) -> str:
    """The script of an import from the app: open the run, import the uploaded zip."""
    return (
        "import dragonfarm_core as dragon\n\n"
        f"run = dragon.open_run({literal(str(run_dir))})\n"
        f"dragon.import_results(run, {literal(results_name)})\n"
    )
