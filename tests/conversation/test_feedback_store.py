"""`feedback`: rating and edit events in, an sft dataset and a preference dataset out."""

import pytest

from dragonfarm_core.conversation.feedback_store import feedback, record_event
from dragonfarm_core.data import conversations, dataset
from dragonfarm_core.rundir import files

SYSTEM = {"role": "system", "content": "Be kind."}
ASK = {"role": "user", "content": "My order arrived damaged."}


def rate(runs_dir, messages, reply, verdict):
    return record_event(
        runs_dir,
        kind="rating",
        messages=messages,
        reply=reply,
        verdict=verdict,
        run="/runs/r1",
        model="r1",
        backend="local",
    )


def edit(runs_dir, messages, reply, text):
    return record_event(
        runs_dir,
        kind="edit",
        messages=messages,
        reply=reply,
        edited=text,
        run="/runs/r1",
        model="r1",
        backend="local",
    )


def test_nothing_yet_gives_empty_records_and_no_datasets(tmp_path):
    fb = feedback(tmp_path)
    assert len(fb.records) == 0 and "verdict" in fb.records.columns
    assert fb.sft is None and fb.pairs is None


def test_records_hold_every_event(tmp_path):
    rate(tmp_path, [SYSTEM, ASK], "Sorry.", "down")
    edit(tmp_path, [SYSTEM, ASK], "Sorry.", "Sorry! A replacement ships today.")
    records = feedback(tmp_path).records
    assert list(records["kind"]) == ["rating", "edit"]
    assert list(records["prompt"]) == [ASK["content"]] * 2
    assert records.loc[1, "edited"] == "Sorry! A replacement ships today."
    assert records["id"].is_unique and records["time"].notna().all()
    assert set(records["run"]) == {"/runs/r1"}


def test_liked_and_edited_replies_become_sft_conversations(tmp_path):
    rate(tmp_path, [SYSTEM, ASK], "We will replace it.", "up")
    follow = [ASK, {"role": "assistant", "content": "Photo?"}, {"role": "user", "content": "Ok"}]
    edit(tmp_path, follow, "Thanks.", "Thanks, a replacement is on its way.")
    rate(tmp_path, [ASK], "Not our problem.", "down")
    fb = feedback(tmp_path, label="round 1")
    assert fb.sft_path == tmp_path / "feedback" / "sft-round-1.jsonl"
    rows = files.read_jsonl(fb.sft_path)
    assert rows == [
        {"messages": [SYSTEM, ASK, {"role": "assistant", "content": "We will replace it."}]},
        {
            "messages": [
                *follow,
                {"role": "assistant", "content": "Thanks, a replacement is on its way."},
            ]
        },
    ]
    assert fb.sft.records() == conversations(str(fb.sft_path)).records()
    assert fb.sft.source == str(fb.sft_path)  # a file, so code(run) can point at it


def test_the_latest_verdict_on_a_reply_wins(tmp_path):
    rate(tmp_path, [ASK], "Maybe.", "up")
    rate(tmp_path, [ASK], "Maybe.", "down")
    fb = feedback(tmp_path)
    assert fb.sft is None and fb.pairs is None and len(fb.records) == 2


def test_liked_or_edited_against_disliked_become_pairs(tmp_path):
    rate(tmp_path, [SYSTEM, ASK], "Not our problem.", "down")
    edit(tmp_path, [SYSTEM, ASK], "Not our problem.", "So sorry; a replacement ships today.")
    rate(tmp_path, [SYSTEM, ASK], "We will refund you.", "up")
    rate(tmp_path, [ASK], "Only liked, no pair.", "up")
    fb = feedback(tmp_path, label="r2")
    rows = files.read_jsonl(fb.pairs_path)
    assert fb.pairs_path.name == "pairs-r2.jsonl"
    assert rows == [
        {
            "prompt": ASK["content"],
            "chosen": "So sorry; a replacement ships today.",
            "rejected": "Not our problem.",
            "system": "Be kind.",
        },
        {
            "prompt": ASK["content"],
            "chosen": "We will refund you.",
            "rejected": "Not our problem.",
            "system": "Be kind.",
        },
    ]
    records = fb.pairs.records()
    assert (
        records
        == dataset(str(fb.pairs_path))
        .map_pairs("prompt", "chosen", "rejected", system="system")
        .records()
    )
    assert records[0] == {
        "prompt": [SYSTEM, ASK],
        "chosen": [{"role": "assistant", "content": "So sorry; a replacement ships today."}],
        "rejected": [{"role": "assistant", "content": "Not our problem."}],
    }


def test_pairs_from_a_multi_turn_chat_keep_the_last_user_turn(tmp_path):
    turns = [
        ASK,
        {"role": "assistant", "content": "Photo?"},
        {"role": "user", "content": "Here it is."},
    ]
    rate(tmp_path, turns, "Bad.", "down")
    rate(tmp_path, turns, "Good, replacing it.", "up")
    row = files.read_jsonl(feedback(tmp_path).pairs_path)[0]
    assert row == {
        "prompt": "Here it is.",
        "chosen": "Good, replacing it.",
        "rejected": "Bad.",
        "system": None,
    }


def test_bad_events_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'up' or 'down'"):
        rate(tmp_path, [ASK], "x", "sideways")
    with pytest.raises(ValueError, match="empty"):
        edit(tmp_path, [ASK], "x", "")
    with pytest.raises(ValueError, match="label"):
        feedback(tmp_path, label="///")


@pytest.mark.slow
def test_feedback_datasets_train_an_sft_run_and_a_dpo_run(tmp_path):
    """The loop closes: ratings and edits become an SFT run and a DPO run on the bundled model."""
    import dragonfarm_core as dragon

    asks = [{"role": "user", "content": f"Order {n} arrived damaged."} for n in range(4)]
    for ask in asks:
        rate(tmp_path, [ask], "Not our problem.", "down")
        edit(tmp_path, [ask], "Not our problem.", "So sorry; a replacement ships today.")
    fb = feedback(tmp_path)
    assert len(fb.sft.records()) == 4 and len(fb.pairs.records()) == 4

    args = dragon.TrainArgs(max_steps=2, batch_size=2, max_seq_len=64)
    cpu = dragon.Hardware(device="cpu")
    sft = dragon.train(fb.sft, "dragonfarm/tiny-support", args=args, hardware=cpu,
                       runs_dir=tmp_path, n_samples=1, wait=True)  # fmt: skip
    dpo = dragon.prefer(fb.pairs, sft, args=args, hardware=cpu, runs_dir=tmp_path,
                        n_samples=1, wait=True)  # fmt: skip
    assert sft.status()["state"] == dpo.status()["state"] == "succeeded"
    assert files.read_config(dpo.dir)["continued_from"] == str(sft.dir)
    assert files.read_samples(dpo.dir)[0]["rejected"] == "Not our problem."
    # Both runs name their data by file, so dragon.code() reproduces them.
    assert "sft-" in dragon.code(sft) and "pairs-" in dragon.code(dpo)
