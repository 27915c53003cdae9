"""Sample generation cuts each prompt to the run's max_seq_len: a 10,000-turn conversation
gets its replies in a blink instead of hanging the run (and the queue) in `generate`.

The cut keeps the end of the conversation: whole turns go from the start, a leading system
message stays while it fits, the last user turn always survives (only its beginning goes when
it alone is longer than the window), and the prompt leaves room for the reply.
"""

from __future__ import annotations

import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import evaluation, sft

HEADER = "<|im_start|>assistant\n"


def _chat(turns: int, system: bool = False, last: str = "And the last question: why?"):
    messages = [{"role": "system", "content": "You are a support agent."}] if system else []
    for i in range(turns):
        messages.append({"role": "user", "content": f"My router {i} keeps dropping off Wi-Fi."})
        messages.append({"role": "assistant", "content": f"Hold the reset button ({i})."})
    messages.append({"role": "user", "content": last})
    return messages


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_short_prompt_is_rendered_as_the_template_says(tokenizer):
    context = _chat(2, system=True)
    assert evaluation.prompt_ids(tokenizer, context, 10_000) == _ids(tokenizer, context)


def test_a_10000_turn_conversation_keeps_its_end_and_the_system_message(tokenizer):
    context = _chat(5_000, system=True)  # 10,001 turns before the reply
    started = time.monotonic()
    ids = evaluation.prompt_ids(tokenizer, context, 200)
    assert time.monotonic() - started < 30  # bisection over whole turns, not turn by turn
    # The most recent whole exchanges that fit, after the system message, ending with the last
    # user turn and the assistant header.
    system, fitting = context[:1], []
    for n in range(1, 5_001):
        kept = system + context[-(2 * n + 1) :]
        if len(_ids(tokenizer, kept)) > 200:
            break
        fitting = kept
    assert len(fitting) > 3 and ids == _ids(tokenizer, fitting)
    header = tokenizer(HEADER, add_special_tokens=False)["input_ids"]
    assert len(ids) <= 200 and ids[-len(header) :] == header


def test_a_last_user_turn_longer_than_the_window_keeps_its_end(tokenizer):
    long_question = " ".join(["router"] * 2_000) + " why"
    context = _chat(3, system=True, last=long_question)
    ids = evaluation.prompt_ids(tokenizer, context, 120)
    assert len(ids) == 120
    assert ids == _ids(tokenizer, context[-1:])[-120:]  # its end, and the assistant header


@pytest.mark.parametrize(
    ("max_len", "max_new", "budget"), [(1024, 256, 768), (256, 24, 232), (64, 256, 32)]
)
def test_the_prompt_leaves_room_for_the_reply(max_len, max_new, budget):
    assert evaluation.prompt_budget(max_len, max_new) == budget


def test_generation_sees_the_cut_prompt(tiny_model_dir, tokenizer, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    widths = []
    real = evaluation.decode  # the shared decode loop the samples go through

    def decode(model, input_ids, *args, **kwargs):
        widths.append(input_ids.shape[1])
        return real(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(evaluation, "decode", decode)
    conversations = [
        _chat(5_000) + [{"role": "assistant", "content": "Reset it."}],
        _chat(1) + [{"role": "assistant", "content": "Reset it."}],
    ]
    replies = evaluation.generate_samples(model, tokenizer, conversations, 8, max_len=128)
    assert len(replies) == 2 and widths and max(widths) <= evaluation.prompt_budget(128, 8)


@pytest.mark.slow
def test_a_run_whose_held_out_row_is_10000_turns_long_finishes(make_run, tiny_model_dir):
    run_dir = make_run(tiny_model_dir, n_train=8, n_eval=2, max_seq_len=128)
    rows = files.read_jsonl(files.data_path(run_dir, "eval"))
    rows[0]["messages"] = _chat(5_000) + [{"role": "assistant", "content": "Reset it."}]
    files.write_jsonl(files.data_path(run_dir, "eval"), rows)
    started = time.monotonic()
    assert sft.main(run_dir) == "succeeded"
    assert time.monotonic() - started < 120
    samples = files.read_samples(run_dir)
    assert samples[0]["prompt"] == "And the last question: why?"
