"""DPO: pair tokenization and masking, reply log-probabilities, the loss by hand, and runs.

Unit tests use the tiny fixture model; slow tests train the bundled model (the fixture model
until the repository has it) for a few steps and read every file back from the run directory.
"""

from __future__ import annotations

import json
import math
import os
import re

import pandas as pd
import pytest
import torch
from trainer_fixtures import support_conversations

import dragonfarm_core as dragon
from dragonfarm_core.rundir import create, files
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.rundir.train_config import ModelSpec, load_config
from dragonfarm_core.settings import Lora, SettingsError
from dragonfarm_core.trainers import dpo, modeling, pref_data, sft
from dragonfarm_core.trainers.common import DataError
from dragonfarm_core.trainers.placement import Placement
from dragonfarm_core.trainers.sft_data import IGNORE

PROGRESS = ["step", "epoch", "loss", "eval_loss", "lr", "grad_norm", "elapsed_s", "eta_s"]
PREF = ["pref_acc", "reward_margin", "eval_pref_acc", "eval_reward_margin"]
CPU32 = Placement(torch.device("cpu"), torch.float32)


def rambling(reply: str) -> str:
    """The same content as one unformatted, hedging paragraph: the reply to move away from."""
    return "ok so basically " + reply.lower().replace(".", ",") + " or something like that"


def support_pairs(n: int, seed: int = 7) -> list[dict]:
    rows = support_conversations(n, seed=seed)
    return [
        {
            "prompt": r["messages"][:-1],
            "chosen": [r["messages"][-1]],
            "rejected": [{"role": "assistant", "content": rambling(r["messages"][-1]["content"])}],
        }
        for r in rows
    ]


def pairs_dataset(n: int, eval_frac: float = 0.2) -> dragon.Dataset:
    rows = support_conversations(n, seed=7)
    frame = pd.DataFrame(
        {
            "question": [r["messages"][-2]["content"] for r in rows],
            "good": [r["messages"][-1]["content"] for r in rows],
            "bad": [rambling(r["messages"][-1]["content"]) for r in rows],
        }
    )
    mapped = dragon.dataset(frame).map_pairs(prompt="question", chosen="good", rejected="bad")
    return mapped.split(eval_frac=eval_frac)


def sft_dataset(n: int) -> dragon.Dataset:
    rows = support_conversations(n, seed=11)
    frame = pd.DataFrame(
        {
            "question": [r["messages"][-2]["content"] for r in rows],
            "answer": [r["messages"][-1]["content"] for r in rows],
        }
    )
    return dragon.dataset(frame).map(prompt="question", response="answer").split(eval_frac=0.2)


FAST = {"batch_size": 2, "grad_accum": 1, "max_seq_len": 192, "logging_steps": 1,
        "extra": {"sample_max_new_tokens": 12}}  # fmt: skip


def write_run(method, dataset, model, path, method_args=None, **args):
    return create.create_run(
        method, dataset, model, Lora(r=8, alpha=16, dropout=0.0),
        dragon.TrainArgs(**{**FAST, **args}), dragon.Hardware(device="cpu"),
        run_dir=path, n_samples=2, method_args=method_args,
    )  # fmt: skip


# --- pairs on disk and as tokens -------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return modeling.load_tokenizer(ModelSpec(name="tiny", base=str(tiny_model_dir)))


def test_pairs_mask_the_prompt_and_keep_both_replies(tokenizer):
    pairs = support_pairs(6)
    data = pref_data.encode_pairs(tokenizer, pairs, max_len=4096)
    assert len(data) == 6 and data.truncated_rows == 0
    sides = data.sides
    for i, pair in enumerate(pairs):
        prompt = tokenizer.apply_chat_template(
            pair["prompt"], tokenize=False, add_generation_prompt=True
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        for row, reply in ((i, pair["chosen"]), (6 + i, pair["rejected"])):
            n = sides.n_masked[row]
            assert sides.input_ids[row][:n] == prompt_ids  # the prompt, as generation sees it
            assert sides.labels(row)[:n] == [IGNORE] * n
            learned = tokenizer.decode(sides.input_ids[row][n:]).replace(" ", "")
            assert learned == (reply[0]["content"] + "<|im_end|>\n").replace(" ", "")
        assert data.lengths[i] == max(len(sides.input_ids[i]), len(sides.input_ids[6 + i]))


def test_a_batch_puts_chosen_rows_first_then_their_rejected_rows(tokenizer):
    data = pref_data.encode_pairs(tokenizer, support_pairs(5), max_len=4096)
    batch = data.batch([3, 1], pad_id=tokenizer.pad_token_id)
    order = [3, 1, 5 + 3, 5 + 1]
    rows, width = batch["input_ids"].shape
    assert rows == 4 and width >= max(len(data.sides.input_ids[i]) for i in order)
    for r, i in enumerate(order):
        n = len(data.sides.input_ids[i])
        assert batch["input_ids"][r, :n].tolist() == data.sides.input_ids[i]
        assert batch["attention_mask"][r].sum() == n
        assert (batch["labels"][r, n:] == IGNORE).all()


def test_truncation_keeps_the_start_of_each_reply(tokenizer):
    data = pref_data.encode_pairs(tokenizer, support_pairs(4), max_len=40)
    assert data.truncated_rows > 0 and max(data.lengths) <= 40
    assert all(
        len(ids) > m for ids, m in zip(data.sides.input_ids, data.sides.n_masked, strict=True)
    )


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": [{"role": "user", "content": "q"}], "chosen": []}, "not a preference pair"),
        (
            {"prompt": [{"role": "assistant", "content": "q"}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]},
            "'prompt' must end with a user turn",
        ),
        (
            {"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "robot", "content": "b"}]},
            "in 'rejected' needs a role",
        ),
    ],
)  # fmt: skip
def test_bad_pair_rows_name_the_file_line_and_field(tmp_path, row, message):
    good = support_pairs(1)[0]
    files.write_jsonl(files.data_path(tmp_path, "train"), [good, row])
    with pytest.raises(DataError, match=rf"train\.jsonl, line 2.*{re.escape(message)}"):
        pref_data.read_pairs(tmp_path, "train")
    assert pref_data.read_pairs(tmp_path, "eval") == []  # no eval file: no held-out pairs


def test_unknown_or_bad_settings_are_a_config_error(make_run, tiny_model_dir):
    run_dir = make_run(tiny_model_dir)
    config = files.read_config(run_dir)
    for method_args, message in (
        ({"beta": 0}, "must be a number > 0"),
        ({"gamma": 1}, "'gamma'"),
        ({"loss_type": "kto"}, "DpoArgs.loss_type = 'kto' is not one of sigmoid, hinge, ipo"),
        ({"label_smoothing": 0.1}, "set loss_type='robust'"),
        ({"loss_type": "robust", "label_smoothing": 0.5}, "label_smoothing = 0.5 is above"),
    ):
        files.write_config(run_dir, {**config, "method": "dpo", "method_args": method_args})
        with pytest.raises(SettingsError, match=re.escape(message)):
            pref_data.read_settings(load_config(run_dir))
    files.write_config(run_dir, {**config, "method": "orpo", "method_args": {"loss_type": "ipo"}})
    with pytest.raises(SettingsError, match="PreferenceArgs takes beta"):  # DPO's, not ORPO's
        pref_data.read_settings(load_config(run_dir))
    files.write_config(run_dir, {**config, "method": "dpo", "method_args": {}})
    assert pref_data.read_settings(load_config(run_dir)) == dragon.DpoArgs(0.1, "sigmoid", 0.0)


# --- scores -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_model(tiny_model_dir):
    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    model = modeling.add_lora(modeling.load_model(spec, CPU32, False), Lora(r=4, dropout=0.0),
                              seed=0, gradient_checkpointing=False, quantized=False)  # fmt: skip
    model.eval()
    return model


@pytest.fixture(scope="module")
def pair_batch(tokenizer):
    data = pref_data.encode_pairs(tokenizer, support_pairs(3), max_len=4096)
    return data.batch([0, 1, 2], tokenizer.pad_token_id)


def test_reply_logps_sum_the_reply_tokens_of_each_row(lora_model, pair_batch):
    with torch.no_grad():
        sums, counts = pref_data.reply_logps(lora_model, pair_batch)
        logits = lora_model(input_ids=pair_batch["input_ids"],
                            attention_mask=pair_batch["attention_mask"]).logits  # fmt: skip
    logps = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = pair_batch["labels"][:, 1:]
    for r in range(len(targets)):
        keep = targets[r] != IGNORE
        expected = logps[r, keep].gather(1, targets[r, keep][:, None]).sum()
        assert float(sums[r]) == pytest.approx(float(expected), rel=1e-5)
        assert int(counts[r]) == int(keep.sum())


def test_dpo_loss_matches_a_hand_computation():
    policy = torch.tensor([-1.0, -2.0, -3.0, -1.0])  # chosen 0, 1; rejected 0, 1
    reference = torch.tensor([-1.5, -2.0, -2.0, -1.0])
    scores = dpo.dpo_loss(policy, reference, n=2, beta=0.5)
    # pair 0: chosen reward 0.5 * 0.5 = 0.25, rejected 0.5 * -1 = -0.5, margin 0.75
    assert scores.chosen.tolist() == [0.25, 0.0] and scores.rejected.tolist() == [-0.5, 0.0]
    assert scores.loss.tolist() == pytest.approx([math.log(1 + math.exp(-0.75)), math.log(2)])
    assert scores.correct().tolist() == [1.0, 0.0]  # a tie is not a win (TRL counts so too)


@pytest.mark.parametrize(
    "loss_type, smoothing", [("sigmoid", 0.0), ("hinge", 0.0), ("ipo", 0.0), ("robust", 0.2)]
)
def test_each_held_out_dpo_loss_is_trls_own(tiny_model_dir, tokenizer, tmp_path, loss_type,
                                            smoothing):  # fmt: skip
    """dpo_score's loss for each loss_type equals what TRL's DPOTrainer trains on, batch for
    batch, with an adapter that has moved away from the reference."""
    from trl import DPOConfig, DPOTrainer

    spec = ModelSpec(name="tiny", base=str(tiny_model_dir))
    model = modeling.add_lora(modeling.load_model(spec, CPU32, False), Lora(r=4, dropout=0.0),
                              seed=0, gradient_checkpointing=False, quantized=False)  # fmt: skip
    torch.manual_seed(1)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.2)  # policy != reference
    pairs = support_pairs(6)
    for p in pairs[3:]:  # the last three the wrong way round: margins of both signs
        p["chosen"], p["rejected"] = p["rejected"], p["chosen"]
    data = pref_data.encode_pairs(tokenizer, pairs, max_len=4096)
    pad, beta = tokenizer.pad_token_id, 0.5
    config = DPOConfig(output_dir=str(tmp_path), beta=beta, loss_type=[loss_type],
                       label_smoothing=smoothing, report_to=[], use_cpu=True)  # fmt: skip
    trainer = dpo.pretokenized(DPOTrainer)(model=model, args=config,
                                           data_collator=dpo.PairCollator(data, pad),
                                           train_dataset=pref_data.as_dataset(data),
                                           processing_class=tokenizer)  # fmt: skip
    model.delete_adapter("ref")  # as dpo.main does: the reference is the adapter switched off
    model.eval()
    pairs = list(range(6))
    with torch.no_grad():
        theirs = trainer._compute_loss(model, dpo.PairCollator(data, pad)([{"pair": i} for i in pairs]),
                                       return_outputs=False)  # fmt: skip
        ours = dpo.dpo_score(model, data.batch(pairs, pad), 6, beta, loss_type, smoothing)
    assert float(ours.loss.mean()) == pytest.approx(float(theirs), rel=1e-4)
    assert ours.margin.min() < 0 < ours.margin.max()  # won and lost pairs both scored
    accuracy = trainer._metrics["eval"]["rewards/accuracies"][-1]
    assert float(ours.correct().mean()) == pytest.approx(accuracy)


def test_dpo_reference_is_the_model_with_the_adapter_off(lora_model, pair_batch):
    with torch.no_grad():
        fresh = dpo.dpo_score(lora_model, pair_batch, n=3, beta=0.1)
        assert fresh.loss.tolist() == pytest.approx([math.log(2)] * 3)  # policy = reference
        base, _ = pref_data.reply_logps(lora_model, pair_batch)
        for name, p in lora_model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
        try:
            moved, _ = pref_data.reply_logps(lora_model, pair_batch)
            scores = dpo.dpo_score(lora_model, pair_batch, n=3, beta=0.1)
        finally:
            for name, p in lora_model.named_parameters():
                if "lora_B" in name:
                    p.sub_(0.05)
    assert not torch.allclose(moved, base)
    assert torch.allclose(scores.chosen, 0.1 * (moved[:3] - base[:3]), atol=1e-5)
    assert torch.allclose(scores.rejected, 0.1 * (moved[3:] - base[3:]), atol=1e-5)


def test_evaluate_pairs_of_an_untrained_adapter_ties_every_pair(lora_model, tokenizer):
    data = pref_data.encode_pairs(tokenizer, support_pairs(5), max_len=4096)
    score = lambda model, batch, n: dpo.dpo_score(model, batch, n, beta=0.1)  # noqa: E731
    results = pref_data.evaluate_pairs(lora_model, data, 2, tokenizer.pad_token_id, score)
    assert results["pref_accuracy"] == 0.0 and results["reward_margin"] == 0.0
    assert results["eval_loss"] == pytest.approx(math.log(2)) and results["eval_pairs"] == 5


# --- runs -------------------------------------------------------------------------------------


def _read_back(run_dir, n_eval: int) -> dict:
    status = files.read_status(run_dir)
    assert status["state"] == "succeeded" and status["step"] == status["total_steps"]
    rows = files.read_progress(run_dir)
    assert all(list(r) == PROGRESS + PREF for r in rows)
    train_rows = [r for r in rows if r["loss"] is not None]
    assert train_rows[0]["step"] == 1 and all(0 <= r["pref_acc"] <= 1 for r in train_rows)
    eval_rows = [r for r in rows if r["eval_loss"] is not None]
    assert eval_rows and eval_rows[-1]["step"] == status["step"]
    result = files.read_eval(run_dir)
    assert result["eval_pairs"] == n_eval and 0 <= result["pref_accuracy"] <= 1
    assert result["pref_accuracy"] == eval_rows[-1]["eval_pref_acc"]
    assert result["reward_margin"] == pytest.approx(status["metrics"]["reward_margin"])
    samples = files.read_samples(run_dir)
    eval_pairs = files.read_jsonl(files.data_path(run_dir, "eval"))
    assert len(samples) == 2
    for sample, pair in zip(samples, eval_pairs, strict=False):
        assert sample["prompt"] == pair["prompt"][-1]["content"]
        assert sample["reference"] == pair["chosen"][0]["content"]
        assert sample["rejected"] == pair["rejected"][0]["content"]
        assert isinstance(sample["generated"], str) and sample["split"] == "eval"
        assert isinstance(sample["before"], str)  # the reply before this run
    adapter = files.adapter_dir(run_dir)
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8
    return {"status": status, "train_rows": train_rows, "eval": result}


@pytest.mark.slow
def test_dpo_run_writes_and_reads_back_every_file(tmp_path, model_dir):
    ds = pairs_dataset(30)
    run_dir = write_run("dpo", ds, str(model_dir), tmp_path / "dpo", {"beta": 0.1},
                        max_steps=6, learning_rate=2e-3, save_steps=3)  # fmt: skip
    assert dpo.main(run_dir) == "succeeded"
    got = _read_back(run_dir, n_eval=6)
    first = got["train_rows"][0]
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)  # policy = reference at step 1
    assert first["pref_acc"] == 0.0 and first["reward_margin"] == pytest.approx(0, abs=1e-4)
    assert got["train_rows"][-1]["pref_acc"] > 0.5  # lr 2e-3 moves it within six steps
    assert got["status"]["pid"] == os.getpid() and got["status"]["metrics"]["train_loss"] > 0
    assert [p.name for p in files.checkpoints(run_dir)] == ["checkpoint-3", "checkpoint-6"]
    # TRL's DPOTrainer wrote the checkpoints; only the run's own adapter is in them and in
    # the run (the reference is the adapter switched off, not a second "ref" adapter)
    newest = files.checkpoints(run_dir)[-1]
    assert (newest / "trainer_state.json").is_file()
    for folder in (newest, files.adapter_dir(run_dir)):
        assert not (folder / "ref").exists()


@pytest.mark.slow
def test_an_ipo_run_trains_and_scores_the_held_out_pairs_with_ipo(tmp_path, model_dir, capsys):
    run_dir = write_run("dpo", pairs_dataset(30), str(model_dir), tmp_path / "ipo",
                        {"beta": 0.1, "loss_type": "ipo"}, max_steps=4,
                        learning_rate=2e-3)  # fmt: skip
    assert dpo.main(run_dir) == "succeeded"
    got = _read_back(run_dir, n_eval=6)
    # policy = reference before the first step: IPO's loss is (0 - 1 / (2 beta))^2 = 25, on
    # the training batch (TRL's) and on the held-out pairs (dpo_score) alike
    assert got["train_rows"][0]["loss"] == pytest.approx(25.0, rel=1e-4)
    rows = files.read_progress(run_dir)
    assert rows[0]["step"] == 0 and rows[0]["eval_loss"] == pytest.approx(25.0, rel=1e-4)
    assert got["eval"]["eval_loss"] < 25.0  # it learned to separate the replies
    assert got["eval"]["loss_type"] == "ipo" and got["eval"]["label_smoothing"] == 0.0
    assert "DPO (ipo loss, beta 0.1)" in capsys.readouterr().out


@pytest.mark.slow
def test_dpo_continues_from_an_sft_run_and_resumes_after_cancel(tmp_path, model_dir):
    parent = write_run("sft", sft_dataset(16), str(model_dir), tmp_path / "sft", max_steps=2)
    assert sft.main(parent) == "succeeded"
    run_dir = write_run("dpo", pairs_dataset(20), Run(parent), tmp_path / "dpo", {"beta": 0.2},
                        max_steps=3, learning_rate=2e-3)  # fmt: skip
    config = files.read_config(run_dir)
    assert config["continued_from"] == str(parent)
    assert config["model"]["adapters"] == [str(files.adapter_dir(parent))]
    assert config["method"] == "dpo"
    assert config["method_args"] == {"beta": 0.2, "loss_type": "sigmoid", "label_smoothing": 0.0}

    files.request_cancel(run_dir)
    assert dpo.main(run_dir) == "cancelled"
    assert [p.name for p in files.checkpoints(run_dir)] == ["checkpoint-1"]
    assert dpo.main(run_dir) == "succeeded"
    got = _read_back(run_dir, n_eval=4)
    assert [r["step"] for r in got["train_rows"]] == [1, 2, 3]
    assert got["eval"]["method"] == "dpo" and got["eval"]["beta"] == 0.2
