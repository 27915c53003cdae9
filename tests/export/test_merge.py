"""dragon.merge(): refusals, the atomic write (a half-written merge is never complete), a failed
merge job's report, and, slow, real merges on the bundled model: plain transformers loads the
folder and decodes the same greedy tokens; a continued run folds every adapter of its chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.cli import commands as cli
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.merge import MergeError
from dragonfarm_core.rundir import files

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"


def run_config(
    run_id: str, base: str, adapters: list[str] | None = None, parent: str | None = None
) -> dict:
    return {
        "schema": 1, "id": run_id, "name": run_id, "method": "sft", "continued_from": parent,
        "model": {"name": "m", "base": base, "adapters": adapters or []}, "dataset": {},
        "data": {"kind": "messages", "n_train": 22, "n_eval": 8},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "args": {"max_steps": 2, "batch_size": 4, "grad_accum": 1, "max_seq_len": 128,
                 "learning_rate": 0.01, "extra": {"sample_max_new_tokens": 4}},
        "hardware": {"device": "cpu", "dtype": "float32"}, "n_samples": 1, "method_args": {},
    }  # fmt: skip


def fake_run(root: Path, state: str = "succeeded", adapter: bool = True, **config) -> Path:
    """A run folder as a trainer leaves it, with an adapter folder that nothing loads."""
    run_dir = root / "run"
    files.write_config(run_dir, run_config("run", "/nowhere", **config))
    files.write_status(run_dir, {"state": state, "step": 2})
    if adapter:
        files.adapter_dir(run_dir).mkdir()
        (files.adapter_dir(run_dir) / "adapter_config.json").write_text("{}")
    return run_dir


def fake_merge(dest: Path, text: str) -> Path:
    """A complete earlier merge in `dest` (its marker written by export.finish)."""
    tmp = export.temp_dir(dest, "earlier")
    tmp.mkdir(parents=True)
    (tmp / "model.safetensors").write_text(text)
    return export.finish(tmp, dest)


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["failed", "cancelled", "running", "queued"])
def test_a_run_that_has_not_succeeded_is_refused_with_the_reason(tmp_path, state):
    run_dir = fake_run(tmp_path, state=state)
    if state in files.ACTIVE_STATES:
        files.update_status(run_dir, pid=os.getpid())  # alive, so it stays `state`
    expected = "once it has succeeded" if state in files.ACTIVE_STATES else "has not succeeded"
    with pytest.raises(MergeError, match=rf"Run run .*{expected}"):
        dragon.merge(run_dir)
    assert files.job_dirs(run_dir) == [] and not (run_dir / files.MERGED_DIR).exists()


def test_a_run_without_its_adapter_or_an_earlier_one_is_refused(tmp_path):
    with pytest.raises(MergeError, match="holds no saved adapter"):
        dragon.merge(fake_run(tmp_path / "a", adapter=False))
    gone = str(tmp_path / "parent" / "adapter")
    with pytest.raises(MergeError, match="continues from the adapter .*which is gone"):
        dragon.merge(fake_run(tmp_path / "b", adapters=[gone], parent=str(tmp_path / "parent")))


def test_a_folder_that_is_not_a_merge_is_never_overwritten(tmp_path):
    run_dir = fake_run(tmp_path)
    theirs = tmp_path / "my-folder"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(MergeError, match="is not a merged model folder"):
        dragon.merge(run_dir, out_dir=theirs)
    assert (theirs / "notes.txt").read_text() == "mine" and files.job_dirs(run_dir) == []


def test_the_cli_reports_a_refusal_and_exits_1(tmp_path, capsys):
    run_dir = fake_run(tmp_path, state="failed")
    assert cli.main(["merge", str(run_dir)]) == 1
    assert "has not succeeded (it is failed)" in capsys.readouterr().err


# --- the atomic write ----------------------------------------------------------------------------


def test_a_half_written_merge_is_not_taken_as_complete_and_is_cleaned(tmp_path):
    run_dir = fake_run(tmp_path)
    dest = export.default_out_dir(run_dir)
    # A merge killed mid-write leaves its temp folder; an old writer's partial merged/ has no
    # marker: neither is a merge.
    killed = export.temp_dir(dest, "4242")
    killed.mkdir()
    (killed / "model.safetensors").write_text("half")
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    assert not export.is_complete(dest) and export.merged_model(run_dir) is None
    assert export.leftovers(dest) == [killed]

    export.remove_leftovers(dest)
    assert not killed.exists()
    fake_merge(dest, "new")
    assert export.is_complete(dest) and export.merged_model(run_dir) == dest
    assert (dest / "model.safetensors").read_text() == "new"
    assert not (dest / "config.json").exists()  # the partial folder was replaced whole
    assert export.leftovers(dest) == []


def test_an_earlier_merge_is_replaced_only_once_the_new_one_is_complete(tmp_path, monkeypatch):
    dest = tmp_path / "merged"
    fake_merge(dest, "old")
    tmp = export.temp_dir(dest, "new")
    tmp.mkdir()
    (tmp / "model.safetensors").write_text("new")
    seen = []
    real_rename = os.rename

    def rename(src, dst):  # the moment the new folder takes the name: it is complete
        if Path(src) == tmp:
            seen.append(export.is_complete(src))
            raise OSError("killed here")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="killed here"):
        export.finish(tmp, dest)
    assert seen == [True]
    # Killed between the two renames: nothing carries the name, and what is left is cleaned.
    assert not export.is_complete(dest) and len(export.leftovers(dest)) == 2
    monkeypatch.setattr(os, "rename", real_rename)
    export.remove_leftovers(dest)
    assert export.leftovers(dest) == []


@pytest.mark.slow
def test_a_failed_merge_job_raises_with_the_log_tail_and_keeps_the_earlier_merge(tmp_path):
    run_dir = fake_run(tmp_path)  # its base is /nowhere: the job fails loading it
    dest = export.default_out_dir(run_dir)
    fake_merge(dest, "earlier")
    with pytest.raises(MergeError, match=r"(?s)failed \(error\): .*Last lines of the log"):
        dragon.merge(run_dir)
    [job] = files.job_dirs(run_dir, export.JOB_KIND)
    assert files.read_status(job)["state"] == "failed"
    assert (dest / "model.safetensors").read_text() == "earlier" and export.is_complete(dest)
    assert "merge:" in "\n".join(files.read_log_tail(run_dir, 5))


def test_the_check_names_the_first_differing_token():
    from dragonfarm_core.trainers.merge_run import compare, first_difference

    class Tok:
        def decode(self, ids):
            return f"<{ids[0]}>"

    same = {"expected_prompt": [1, 2], "merged_prompt": [1, 2]}
    cases = [{**same, "expected_reply": [7, 8], "merged_reply": [7, 8]},
             {**same, "expected_reply": [7, 8, 9], "merged_reply": [7, 4, 9]}]  # fmt: skip
    assert compare(Tok(), cases, "prompt") is None
    assert compare(Tok(), cases, "reply") == {
        "prompt": 1, "in": "reply", "position": 1,
        "expected": {"id": 8, "text": "<8>"}, "merged": {"id": 4, "text": "<4>"},
    }  # fmt: skip
    assert first_difference([1, 2, 3], [1, 2]) == 2 and first_difference([1], [1]) is None
    cases[0]["merged_reply"] = [7]  # stopped early: the missing token is the difference
    assert compare(Tok(), cases, "reply")["merged"] == {"id": None, "text": "(ended)"}


# --- real merges on the bundled model (slow) ---------------------------------------------------


def train(run_dir: Path, rows: list[dict], base: Path, parent: Path | None = None) -> Path:
    from dragonfarm_core.trainers import sft

    files.write_jsonl(files.data_path(run_dir, "train"), rows[:22])
    files.write_jsonl(files.data_path(run_dir, "eval"), rows[22:])
    adapters = [str(files.adapter_dir(parent))] if parent else []
    files.write_config(run_dir, run_config(run_dir.name, str(base), adapters,
                                           str(parent) if parent else None))  # fmt: skip
    files.write_status(run_dir, {"state": "queued"})
    assert sft.main(run_dir) == "succeeded"
    return run_dir


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def folded(base: Path, adapters: list[Path]) -> dict:
    """The base's weights with `adapters` merged in, in order, by peft in this process."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype="float32")
    for adapter in adapters:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


PLAIN_LOAD = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(path)
tok = AutoTokenizer.from_pretrained(path)
text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                               add_generation_prompt=True)
ids = tok(text, return_tensors="pt", add_special_tokens=False)
model.generate(**ids, max_new_tokens=4, do_sample=False)
print(json.dumps({"peft": "peft" in sys.modules, "dragonfarm": "dragonfarm_core" in sys.modules,
                  "template": bool(tok.chat_template), "eos": model.generation_config.eos_token_id}))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two tiny real runs on the bundled model: `first`, and `second` continued from it."""
    sys.path.insert(0, str(ROOT / "tests" / "trainers"))
    from trainer_fixtures import build_tiny_model, support_conversations

    root = tmp_path_factory.mktemp("merge")
    base = BUNDLED if (BUNDLED / "config.json").is_file() else build_tiny_model(root / "m")
    first = train(root / "first", support_conversations(30, seed=5), base)
    second = train(root / "second", support_conversations(30, seed=9), base, parent=first)
    return base, first, second


@pytest.mark.slow
def test_a_merge_loads_with_plain_transformers_and_decodes_the_same_tokens(trained):
    base, first, _ = trained
    path = dragon.merge(first)
    assert path == (first / files.MERGED_DIR).resolve() and export.is_complete(path)
    names = ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
             "generation_config.json", "chat_template.jinja"]  # fmt: skip
    names += [n for n in ("tokenizer.model",) if (base / n).is_file()]  # for llama.cpp
    for name in names:
        assert (path / name).is_file(), name
    check = export.merge_check(path)
    assert check["identical"] is True and check["first_difference"] is None
    assert check["prompts"] == 4 and check["split"] == "eval"
    assert all(c["expected_reply"] == c["merged_reply"] and c["expected_reply"]
               for c in check["cases"])  # fmt: skip
    assert check["adapters"] == [str(files.adapter_dir(first))]
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_LOAD, str(path)], capture_output=True, text=True,
        timeout=300, cwd=path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["peft"] is False and loaded["dragonfarm"] is False and loaded["template"]
    # The adapter is in the weights: they are base + adapter, not the base.
    merged, plain = weights(path), folded(base, [])
    expected = folded(base, [files.adapter_dir(first)])
    changed = [k for k in merged if not merged[k].equal(plain[k])]
    assert changed and all(merged[k].allclose(expected[k], atol=1e-6) for k in merged)


@pytest.mark.slow
def test_a_continued_run_folds_every_adapter_of_its_chain_in_order(trained, tmp_path):
    base, first, second = trained
    out = tmp_path / "second-merged"
    assert dragon.merge(second, out_dir=out) == out.resolve()
    check = export.merge_check(out)
    assert check["identical"] is True
    assert check["adapters"] == [str(files.adapter_dir(first)), str(files.adapter_dir(second))]
    merged = weights(out)
    chain = folded(base, [files.adapter_dir(first), files.adapter_dir(second)])
    only_own = folded(base, [files.adapter_dir(second)])
    assert all(merged[k].allclose(chain[k], atol=1e-6) for k in merged)
    assert any(not merged[k].allclose(only_own[k], atol=1e-6) for k in merged)
    [job] = files.job_dirs(second, export.JOB_KIND)
    assert files.read_status(job)["state"] == "succeeded"
