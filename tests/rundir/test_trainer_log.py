"""What a trainer process writes to train.log: no known library noise, the device in words."""

from __future__ import annotations

import json
import os
import textwrap
import warnings
from pathlib import Path

import pytest

from dragonfarm_core.rundir import allocator, files, queue
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.launch import start_run
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.trainers.log_noise import quiet_library_noise

NOISE = (
    "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use "
    "`is_activation_checkpointing` instead."
)
# A trainer that warns like transformers does under peft, then warns about something else,
# then trains as the fake trainer does.
NOISY_TRAINER = f"""
import warnings
import fake_trainer

def main(run_dir):
    warnings.warn({NOISE!r}, FutureWarning)
    warnings.warn("some_option is deprecated; use other_option", FutureWarning)
    fake_trainer.main(run_dir)
"""


def test_known_library_noise_is_ignored_and_other_warnings_are_not():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_library_noise()
        warnings.warn(NOISE, FutureWarning, stacklevel=1)
        warnings.warn("a real deprecation", FutureWarning, stacklevel=1)
        warnings.warn(NOISE, UserWarning, stacklevel=1)  # same words, another kind: kept
    assert [(w.category, str(w.message)) for w in seen] == [
        (FutureWarning, "a real deprecation"),
        (UserWarning, NOISE),
    ]


def test_train_log_has_no_library_noise_and_names_the_device(
    runs_root, sft_data, model_dir, tmp_path: Path, monkeypatch
):
    (tmp_path / "noisy_trainer.py").write_text(textwrap.dedent(NOISY_TRAINER))
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "noisy_trainer")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    start_run(path)
    run = Run(path).wait(poll=0.05)
    assert run.state == "succeeded"
    log = "\n".join(run.logs(200))
    assert "is_gradient_checkpointing" not in log
    assert "some_option is deprecated" in log  # only the known noise is filtered
    device = queue.queue_key(files.read_config(path))
    assert f"running on {device}." in log and "(queue" not in log


# A trainer that says which malloc its process runs on, then trains as the fake trainer does.
MALLOC_TRAINER = """
import json, os
import fake_trainer
from dragonfarm_core.rundir import allocator

def main(run_dir):
    seen = {"pid": os.getpid(), "malloc": allocator.allocator_in_use(),
            "preload": os.environ.get("LD_PRELOAD")}
    print("MALLOC " + json.dumps(seen), flush=True)
    fake_trainer.main(run_dir)
"""


@pytest.mark.slow
def test_the_trainer_restarts_itself_on_a_fast_malloc_in_the_same_process(
    runs_root, sft_data, model_dir, tmp_path: Path, monkeypatch
):
    library = allocator.fast_allocator()
    assert library, (
        "no tcmalloc or jemalloc here: install libtcmalloc-minimal4 (scripts/test.sh does)"
    )
    (tmp_path / "malloc_trainer.py").write_text(textwrap.dedent(MALLOC_TRAINER))
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "malloc_trainer")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))

    def trained() -> tuple[int, dict]:
        path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
        pid = start_run(path)
        run = Run(path).wait(poll=0.05)
        assert run.state == "succeeded"
        line = next(x for x in run.logs(200) if x.startswith("MALLOC "))
        return pid, json.loads(line.removeprefix("MALLOC "))

    pid, seen = trained()
    # exec'd again with the library preloaded: the launcher's pid is still the trainer's
    assert seen == {"pid": pid, "malloc": library.removeprefix("lib").split(".so")[0],
                    "preload": library}  # fmt: skip
    monkeypatch.setenv("DRAGONFARM_ALLOCATOR", "system")
    pid, seen = trained()
    assert seen == {"pid": pid, "malloc": "the system's", "preload": None}
