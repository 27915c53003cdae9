"""dragon.publish against a local server speaking the Hub API (tests/hub_fakes.py), driven
through huggingface_hub itself: the repo created and the files committed (over plain LFS: the
server offers no Xet), the model card, the refusals (401, a read-only token, 403, a namespace
that is not the token's), and a canary token that must reach the Hub and nothing else.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hub_fakes import FakeHub

import dragonfarm_core as dragon
from dragonfarm_core.export import hub as publishing_hub
from dragonfarm_core.export import merge as export
from dragonfarm_core.export import publishing as pub
from dragonfarm_core.export.publishing import PublishError
from dragonfarm_core.rundir import files

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
CANARY = "hf_canaryXq7Zt0k3nD0NotLeakMe"
QUIET = {"log": lambda line: None}


def config(run_id: str) -> dict:
    return {
        "schema": 1, "id": run_id, "name": "support", "method": "sft",
        "model": {"name": "dragonfarm/tiny-support", "base": str(BUNDLED), "adapters": []},
        "dataset": {"source": "/home/someone/private/tickets-2026.csv", "format": "csv",
                    "name": "tickets-2026", "n_rows": 200},
        "data": {"kind": "messages", "n_train": 190, "n_eval": 10},
        "lora": {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "auto"},
        "args": {"epochs": 3, "learning_rate": 0.0002, "batch_size": 4, "grad_accum": 4,
                 "max_seq_len": 1024, "max_steps": None},
        "method_args": {},
    }  # fmt: skip


def finished_run(root: Path) -> Path:
    """A succeeded run as training and a merge leave it: adapter, eval, progress, merged/."""
    run_dir = root / "20260101-000000-support"
    files.write_config(run_dir, config(run_dir.name))
    files.write_status(run_dir, {"state": "succeeded", "step": 36})
    adapter = files.adapter_dir(run_dir)
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 16, "peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 2048)
    (adapter / "README.md").write_text("peft's own card, replaced")
    files.write_eval(
        run_dir, {"eval_loss": 0.91, "perplexity": 2.48, "eval_tokens": 812, "step": 36}
    )
    for step in range(5, 40, 5):
        row = {"step": step, "loss": 2.0 / step, **({"eval_loss": 0.9} if step == 35 else {})}
        files.append_progress(run_dir, row)
    files.write_json(run_dir / files.JUDGE, {"judge": "claude", "mean_score": 7.4, "n": 10,
                                             "rubric": "Concrete next steps."})  # fmt: skip
    dest = export.default_out_dir(run_dir)
    tmp = export.temp_dir(dest, "test")
    tmp.mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja"):  # fmt: skip
        shutil.copyfile(BUNDLED / name, tmp / name)
    (tmp / "model.safetensors").write_bytes(b"\1" * 4096)
    files.write_json(tmp / export.CHECK_FILE, {"identical": True, "prompts": 4, "split": "eval",
                                               "max_new_tokens": 16, "dtype": "float32",
                                               "cases": [{"prompt": "a held-out prompt"}]})  # fmt: skip
    export.finish(tmp, dest)
    return run_dir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return finished_run(tmp_path)


def front_matter(card: str) -> dict:
    head = card.split("---\n")[1]
    return {k: json.loads(v) for k, v in (line.split(": ", 1) for line in head.splitlines())}


def test_the_merged_model_is_created_and_committed_through_huggingface_hub(run_dir):
    with FakeHub() as hub:
        url = dragon.publish(
            run_dir, "alice/support-agent", token="hf_good", endpoint=hub.url, **QUIET
        )
    assert url == f"{hub.url}/alice/support-agent"
    stored = hub.repos["alice/support-agent"]
    assert sorted(stored) == ["README.md", "chat_template.jinja", "config.json",
                              "generation_config.json", "loss.png", "model.safetensors",
                              "tokenizer.json", "tokenizer_config.json"]  # fmt: skip
    assert stored["model.safetensors"] == b"\1" * 4096 and stored["loss.png"][:4] == b"\x89PNG"
    # The bookkeeping stays home: no COMPLETE marker, no merge_check.json (held-out prompts).
    assert export.COMPLETE not in stored and export.CHECK_FILE not in stored
    assert hub.private["alice/support-agent"] is False
    paths = [r["path"] for r in hub.requests]
    assert (
        "/api/repos/create" in paths and "/alice/support-agent.git/info/lfs/objects/batch" in paths
    )
    assert any(p.startswith("/lfs/") for p in paths)  # plain LFS: the weights went by PUT
    assert not any("xet" in p for p in paths)
    [commit] = hub.commits
    assert (
        commit["lines"][0]["value"]["summary"]
        == "dragonfarm: merged model of run 20260101-000000-support"
    )


def test_the_model_card_says_what_the_model_is_and_how_to_load_it(run_dir):
    with FakeHub() as hub:
        dragon.publish(run_dir, "support-agent", token="hf_good", endpoint=hub.url, **QUIET)
    card = hub.repos["alice/support-agent"]["README.md"].decode()  # no namespace: the user's
    meta = front_matter(card)
    assert meta == {"base_model": "dragonfarm/tiny-support", "library_name": "transformers",
                    "license": "apache-2.0", "tags": ["dragonfarm", "sft", "lora"],
                    "pipeline_tag": "text-generation"}  # fmt: skip
    assert "tickets-2026.csv (200 rows): 190 for training, 10 held out" in card
    assert "/home/someone" not in card  # the data file by its name only
    assert "LoRA r=16, alpha=32, dropout=0.05" in card and "learning rate 0.0002" in card
    assert "3 epochs" in card and "Trained 36 steps" in card
    assert "| eval_loss | 0.91 |" in card and "| perplexity | 2.48 |" in card
    assert "## Judge" in card and "| mean_score | 7.4 |" in card and "Concrete next" not in card
    assert "![Training loss](loss.png)" in card
    assert "equal those of base + adapter on 4 eval prompts" in card
    assert 'AutoModelForCausalLM.from_pretrained("alice/support-agent")' in card
    assert "convert_hf_to_gguf.py" in card and "serve_ollama" in card


def test_the_adapter_goes_with_a_peft_card(run_dir):
    with FakeHub() as hub:
        url = dragon.publish(run_dir, "acme/support-lora", what="adapter", private=True,
                             token="hf_good", endpoint=hub.url, **QUIET)  # fmt: skip
    stored = hub.repos["acme/support-lora"]
    assert url.endswith("/acme/support-lora") and hub.private["acme/support-lora"] is True
    assert sorted(stored) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "loss.png",
    ]
    card = stored["README.md"].decode()
    meta = front_matter(card)
    assert meta["library_name"] == "peft"
    assert "base_model:adapter:dragonfarm/tiny-support" in meta["tags"]
    assert 'AutoPeftModelForCausalLM.from_pretrained("acme/support-lora")' in card
    assert "peft's own card" not in card and "Merge check" not in card


def test_gguf_files_exported_from_the_run_go_with_the_merged_model(run_dir):
    (run_dir / "gguf").mkdir()
    (run_dir / "gguf" / "model-q8_0.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    with FakeHub() as hub:
        dragon.publish(run_dir, "alice/with-gguf", token="hf_good", endpoint=hub.url, **QUIET)
        dragon.publish(
            run_dir, "alice/without", token="hf_good", endpoint=hub.url, gguf=False, **QUIET
        )
    assert hub.repos["alice/with-gguf"]["model-q8_0.gguf"].startswith(b"GGUF")
    card = hub.repos["alice/with-gguf"]["README.md"].decode()
    assert "llama-cli -hf alice/with-gguf" in card and "ollama run hf.co/alice/with-gguf" in card
    assert "gguf" in front_matter(card)["tags"]
    assert "model-q8_0.gguf" not in hub.repos["alice/without"]


def test_an_existing_repo_of_yours_is_updated(run_dir):
    with FakeHub(owners={"alice/support-agent": "alice"}) as hub:
        dragon.publish(run_dir, "alice/support-agent", token="hf_good", endpoint=hub.url,
                       commit_message="round 2", **QUIET)  # fmt: skip
    assert "config.json" in hub.repos["alice/support-agent"]
    assert hub.commits[0]["lines"][0]["value"]["summary"] == "round 2"


def test_an_invalid_token_is_refused_with_what_to_do(run_dir):
    with FakeHub() as hub, pytest.raises(PublishError, match=r"refused the token \(401") as caught:
        dragon.publish(run_dir, "alice/x", token="hf_wrong", endpoint=hub.url, **QUIET)
    assert "HF_TOKEN" in str(caught.value) and f"{hub.url}/settings/tokens" in str(caught.value)
    assert hub.repos == {}


def test_a_read_only_token_is_refused_before_anything_is_written(run_dir):
    with (
        FakeHub(users={"hf_read": ("alice", [], "read")}) as hub,
        pytest.raises(PublishError, match="read-only"),
    ):
        dragon.publish(run_dir, "alice/x", token="hf_read", endpoint=hub.url, **QUIET)
    assert [r["path"] for r in hub.requests] == ["/api/whoami-v2"]


def test_someone_elses_namespace_is_refused_before_anything_is_written(run_dir):
    mine = r"bob/x belongs to bob, which is not this token's user or one of its organisations"
    with FakeHub() as hub, pytest.raises(PublishError, match=mine + r" \(alice, acme\)"):
        dragon.publish(run_dir, "bob/x", token="hf_good", endpoint=hub.url, **QUIET)
    assert [r["path"] for r in hub.requests] == ["/api/whoami-v2"]


def test_a_repo_owned_by_someone_else_gets_the_hubs_403_explained(run_dir):
    # In an organisation of yours, but another member's repo you may not write to.
    refused = r"does not let this token write to acme/carols-model \(the token is alice's\) \(403"
    with (
        FakeHub(owners={"acme/carols-model": "carol"}) as hub,
        pytest.raises(PublishError, match=refused),
    ):
        dragon.publish(run_dir, "acme/carols-model", token="hf_good", endpoint=hub.url, **QUIET)
    assert hub.repos["acme/carols-model"] == {}


def test_no_token_anywhere_is_a_clear_error(run_dir, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(
        PublishError, match="No Hugging Face token: set HF_TOKEN, run `hf auth login`"
    ):
        dragon.publish(run_dir, "alice/x", endpoint="http://127.0.0.1:9", **QUIET)


def test_the_token_comes_from_hf_token_or_the_login_cache(run_dir, monkeypatch, tmp_path):
    from huggingface_hub import constants

    with FakeHub() as hub:
        monkeypatch.setenv("HF_TOKEN", "hf_good")
        dragon.publish(run_dir, "alice/from-env", endpoint=hub.url, **QUIET)
        monkeypatch.delenv("HF_TOKEN")
        (tmp_path / "token").write_text("hf_good\n")
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
        dragon.publish(run_dir, "alice/from-cache", endpoint=hub.url, **QUIET)
    assert {"alice/from-env", "alice/from-cache"} <= set(hub.repos)


def test_refusals_of_bad_arguments(run_dir):
    with pytest.raises(ValueError, match="'merged' .* or 'adapter'"):
        dragon.publish(run_dir, "alice/x", what="gguf", token="t", **QUIET)
    files.write_status(run_dir, {"state": "failed"})
    with pytest.raises(PublishError, match="has not succeeded"):
        dragon.publish(run_dir, "alice/x", token="t", **QUIET)


def test_xet_is_used_only_against_the_hub_itself():
    from huggingface_hub import constants

    before = constants.HF_HUB_DISABLE_XET
    with publishing_hub.transfer_for("http://127.0.0.1:1234"):
        assert constants.HF_HUB_DISABLE_XET is True
    with publishing_hub.transfer_for(constants._HF_DEFAULT_ENDPOINT):
        assert constants.HF_HUB_DISABLE_XET is before
    assert constants.HF_HUB_DISABLE_XET is before


def test_the_publish_job_gets_the_token_on_stdin_and_it_is_written_nowhere(run_dir, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with FakeHub(users={CANARY: ("alice", [], "write")}) as hub:
        pending = dragon.start_publish(run_dir, "alice/canary", token=CANARY, endpoint=hub.url)
        result = pending.wait(timeout=180)
    assert result["url"] == f"{hub.url}/alice/canary" and "README.md" in result["files"]
    # It reached the Hub (every call authenticated with it) ...
    sent = [
        r["headers"].get("authorization") for r in hub.requests if not r["path"].startswith("/lfs/")
    ]
    assert sent and all(h == f"Bearer {CANARY}" for h in sent)
    # ... and nothing else: no file in the run (job folder, status, logs), nothing uploaded.
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaks == []
    assert all(CANARY.encode() not in content for content in hub.repos["alice/canary"].values())
    log = "\n".join(pending.logs(200))
    assert "published merged model" in log and CANARY not in log
    assert "--repo alice/canary" in log  # the command is logged, without the token


def test_start_publish_refuses_without_a_token_before_starting_a_job(
    run_dir, monkeypatch, tmp_path
):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "none"))
    with pytest.raises(PublishError, match="No Hugging Face token"):
        dragon.start_publish(run_dir, "alice/x")
    assert files.job_dirs(run_dir, pub.JOB_KIND) == []


def test_a_failed_publish_job_names_the_reason(run_dir):
    with FakeHub() as hub:
        pending = dragon.start_publish(run_dir, "bob/x", token="hf_good", endpoint=hub.url)
        with pytest.raises(PublishError, match=r"Publishing run .* failed \(error\): PublishError: "
                                               r"bob/x belongs to bob"):  # fmt: skip
            pending.wait(timeout=180)


def test_the_cli_publishes_and_reports_a_refusal(run_dir, monkeypatch, capsys):
    from huggingface_hub import constants

    from dragonfarm_core.cli import commands as cli

    with FakeHub() as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # as HF_ENDPOINT sets it
        monkeypatch.setenv("HF_TOKEN", "hf_good")
        argv = ["publish", str(run_dir), "alice/cli", "--what", "adapter", "--private"]
        assert cli.main(argv) == 0
        assert f"Published at {hub.url}/alice/cli" in capsys.readouterr().out
        assert hub.private["alice/cli"] is True and "adapter_config.json" in hub.repos["alice/cli"]
        assert cli.main(["publish", str(run_dir), "bob/cli"]) == 1
    assert capsys.readouterr().err.startswith("dragonfarm publish: bob/cli belongs to bob")
