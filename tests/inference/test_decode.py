"""The shared decode loop (`worker_decode.decode`) against transformers' `generate`.

Greedy replies are generate()'s token for token (left-padded batches, rows stopping at
different steps, the bundled model's repetition penalty of 1.1 applied); seeded sampling draws
the very tokens generate() draws with the worker's settings (the penalty, top_k 50, top_p,
temperature); the output has generate()'s shape (stop token kept, pad after it); the GRPO
trainer can score the sampled ids with grad; the thread rule picks one thread for a small
model and gives the trainer its threads back.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer

from dragonfarm_core.inference.worker_decode import (
    Decoding,
    cpu_threads,
    decode,
    default_stop,
    draw,
    start_positions,
)
from dragonfarm_core.models import bundled_model_path

CONVERSATIONS = [
    "Hi",
    "My thermostat keeps dropping off Wi-Fi every evening. What should I try first?",
    "Refund please",
]


@pytest.fixture(scope="module")
def bundled():
    # One thread: both sides decode a 6M model several times, which on a shared CPU is many
    # times faster that way (see worker_decode.ONE_THREAD_BELOW).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = bundled_model_path()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    yield model, tokenizer
    torch.set_num_threads(threads)


def batch(tokenizer, texts=CONVERSATIONS):
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}],
                                             add_generation_prompt=True, tokenize=False)
               for t in texts]  # fmt: skip
    return tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)


def reference(model, inputs, **options):
    with torch.inference_mode():
        out = model.generate(**inputs, pad_token_id=model.config.pad_token_id, **options)
    return out[:, inputs["input_ids"].shape[1] :]


def ours(model, inputs, settings, **options):
    return decode(model, inputs["input_ids"], inputs["attention_mask"], settings,
                  pad_id=model.config.pad_token_id, **options)  # fmt: skip


def test_greedy_is_generates_token_for_token_in_a_padded_batch(bundled):
    model, tokenizer = bundled
    inputs = batch(tokenizer)
    assert model.generation_config.repetition_penalty == 1.1  # the path under test uses it
    stop = default_stop(model)
    expected = reference(model, inputs, max_new_tokens=48, do_sample=False, eos_token_id=stop)
    got = ours(model, inputs, Decoding.from_model(model, 0.0), max_new_tokens=48, stop=stop)
    assert torch.equal(got, expected)
    # and each row alone is the same as in the batch (the padding is invisible)
    for i, text in enumerate(CONVERSATIONS):
        alone = ours(model, batch(tokenizer, [text]), Decoding.from_model(model, 0.0),
                     max_new_tokens=48, stop=stop)  # fmt: skip
        assert alone[0].tolist() == got[i, : alone.shape[1]].tolist()


def test_ignoring_the_stop_decodes_every_row_to_the_limit(bundled):
    model, tokenizer = bundled
    inputs = batch(tokenizer)
    expected = reference(model, inputs, max_new_tokens=40, min_new_tokens=40, do_sample=False)
    got = ours(model, inputs, Decoding.from_model(model, 0.0), max_new_tokens=40, stop=[])
    assert got.shape == (3, 40) and torch.equal(got, expected)


def test_rows_stop_as_they_finish_and_are_padded_after(bundled):
    model, tokenizer = bundled
    inputs = batch(tokenizer)
    free = ours(model, inputs, Decoding(), max_new_tokens=12, stop=[])
    stopper = int(free[0, 2])  # row 0 stops at its third token
    got = ours(model, inputs, Decoding(), max_new_tokens=12, stop=[stopper])
    assert got[0, 2] == stopper and (got[0, 3:] == model.config.pad_token_id).all()
    expected = reference(model, inputs, max_new_tokens=12, do_sample=False,
                         eos_token_id=[stopper], repetition_penalty=1.0)  # fmt: skip
    assert torch.equal(got, expected)


def test_seeded_sampling_draws_what_generate_draws(bundled):
    model, tokenizer = bundled
    inputs = batch(tokenizer)
    stop = default_stop(model)
    torch.manual_seed(11)
    expected = reference(model, inputs, max_new_tokens=32, do_sample=True, temperature=0.8,
                         top_p=0.9, eos_token_id=stop)  # fmt: skip
    torch.manual_seed(11)
    got = ours(model, inputs, Decoding.from_model(model, 0.8, 0.9), max_new_tokens=32, stop=stop)
    assert torch.equal(got, expected)
    torch.manual_seed(12)
    other = ours(model, inputs, Decoding.from_model(model, 0.8, 0.9), max_new_tokens=32,
                 stop=stop)  # fmt: skip
    assert not torch.equal(other, got)


def test_repeated_prompts_are_read_once_and_decode_as_generate_does(bundled):
    """GRPO's groups: each prompt several times. The prompt pass reads each distinct one once
    and the rows go on from copies of its cache: generate()'s tokens, greedy and seeded."""
    model, tokenizer = bundled
    inputs = batch(tokenizer, [t for t in CONVERSATIONS for _ in range(3)])
    stop = default_stop(model)
    read = []
    hook = model.model.register_forward_pre_hook(
        lambda _m, _a, kw: read.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        greedy = ours(model, inputs, Decoding.from_model(model, 0.0), max_new_tokens=24, stop=stop)
        torch.manual_seed(5)
        sampled = ours(model, inputs, Decoding.from_model(model, 0.8, 0.9), max_new_tokens=24,
                       stop=stop)  # fmt: skip
    finally:
        hook.remove()
    prompt_len = inputs["input_ids"].shape[1]
    assert read == [(3, prompt_len)] * 2  # then the trimmed step, which reads no prompt
    untrimmed = ours(model, inputs, Decoding.from_model(model, 0.0), max_new_tokens=24,
                     stop=stop, trimmed=False)  # model.forward on the repeated cache  # fmt: skip
    assert torch.equal(untrimmed, greedy)
    assert torch.equal(greedy, reference(model, inputs, max_new_tokens=24, do_sample=False,
                                         eos_token_id=stop))  # fmt: skip
    torch.manual_seed(5)
    expected = reference(model, inputs, max_new_tokens=24, do_sample=True, temperature=0.8,
                         top_p=0.9, eos_token_id=stop)  # fmt: skip
    assert torch.equal(sampled, expected)
    assert not torch.equal(sampled[0], sampled[1])  # a group's rows still sample apart


def test_the_worker_settings_come_from_the_generation_config_and_pure_has_none(bundled):
    model, _ = bundled
    settings = Decoding.from_model(model, 0.7, 0.9)
    assert (settings.repetition_penalty, settings.top_k, settings.top_p) == (1.1, 50, 0.9)
    names = [type(p).__name__ for p in settings.processors()]
    assert names == ["RepetitionPenaltyLogitsProcessor", "TemperatureLogitsWarper",
                     "TopKLogitsWarper", "TopPLogitsWarper"]  # fmt: skip
    assert [type(p).__name__ for p in Decoding.from_model(model, 0.0).processors()] == [
        "RepetitionPenaltyLogitsProcessor"]  # fmt: skip
    assert len(Decoding.pure(1.0).processors()) == 0


@pytest.mark.parametrize("vocab", [256, 200])  # a whole number of blocks, and not
def test_draw_picks_tokens_as_often_as_their_probability_says(vocab):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(vocab, generator=generator) * 3
    logits[5], logits[vocab - 1] = float("-inf"), 4.0  # never drawn; the last one, often
    probs = torch.softmax(logits, -1)
    rows = 100_000
    torch.manual_seed(3)
    drawn = draw(probs.expand(rows, vocab).contiguous())
    counts = torch.bincount(drawn, minlength=vocab).double()
    assert counts[5] == 0 and drawn.max() < vocab
    expected = probs.double() * rows
    common = expected > 50  # a chi-square over the tokens drawn often enough to test
    chi2 = (((counts - expected) ** 2 / expected)[common]).sum().item()
    dof = int(common.sum()) - 1
    assert chi2 < dof + 5 * (2 * dof) ** 0.5, (chi2, dof)
    assert abs(counts[vocab - 1] / rows - probs[vocab - 1]) < 0.005
    torch.manual_seed(3)
    assert torch.equal(draw(probs.expand(rows, vocab).contiguous()), drawn)  # the seed decides
    one_hot = torch.zeros(3, vocab)
    one_hot[0, 0], one_hot[1, vocab - 1], one_hot[2, 130] = 1, 1, 1
    assert draw(one_hot).tolist() == [0, vocab - 1, 130]


def test_pure_sampling_draws_by_cumulative_sums_and_the_worker_s_as_generate(bundled):
    model, tokenizer = bundled
    inputs = batch(tokenizer)
    assert Decoding.from_model(model, 0.8).as_generate and not Decoding.pure(1.0).as_generate
    torch.manual_seed(11)
    pure = ours(model, inputs, Decoding.pure(1.0), max_new_tokens=16, stop=[])
    torch.manual_seed(11)
    as_generate = ours(model, inputs, Decoding(temperature=1.0), max_new_tokens=16, stop=[])
    torch.manual_seed(11)
    expected = reference(model, inputs, max_new_tokens=16, min_new_tokens=16, do_sample=True,
                         temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)  # fmt: skip
    assert torch.equal(as_generate, expected) and not torch.equal(pure, expected)


def test_the_streamer_sees_the_reply_as_generate_streams_it(bundled):
    model, tokenizer = bundled
    inputs = batch(tokenizer, CONVERSATIONS[1:2])
    pieces: list[str] = []

    class Collect(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            pieces.append(text)

    new = ours(model, inputs, Decoding.from_model(model, 0.0), max_new_tokens=30,
               stop=default_stop(model), streamer=Collect(tokenizer, skip_prompt=True,
                                                          skip_special_tokens=True))  # fmt: skip
    assert "".join(pieces).strip() == tokenizer.decode(new[0], skip_special_tokens=True).strip()
    assert len(pieces) > 1


def test_sampled_ids_can_be_scored_with_grad(bundled):
    """GRPO feeds the rollout back through the model with grad: no inference tensors."""
    model, tokenizer = bundled
    inputs = batch(tokenizer, CONVERSATIONS[:1])
    new = ours(model, inputs, Decoding.pure(1.0), max_new_tokens=4, stop=[])
    assert not new.is_inference()
    ids = torch.cat([inputs["input_ids"], new], dim=1)
    model.get_input_embeddings()(ids).sum().backward()  # raises on an inference tensor
    model.zero_grad(set_to_none=True)


def test_left_pad_positions_count_from_the_first_real_token():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert start_positions(mask).tolist() == [[1, 1, 0, 1], [0, 1, 2, 3]]


def test_a_small_model_decodes_on_one_thread_and_the_count_comes_back(bundled, monkeypatch):
    model, _ = bundled
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    before = torch.get_num_threads()
    with cpu_threads(model):
        inside = torch.get_num_threads()
    assert inside == 1 and torch.get_num_threads() == before
    with cpu_threads(model, rows=8):  # a batch this large splits its products
        assert torch.get_num_threads() == before
    with cpu_threads(model, rows=7):
        assert torch.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(before))  # the user's choice wins
    with cpu_threads(model):
        assert torch.get_num_threads() == before


def test_one_row_on_row_copies_decodes_on_the_cores_others_leave_idle(monkeypatch):
    """On float16 row copies one row pays for a second thread on an idle machine and loses
    three quarters of its speed to a busy core (worker_decode.decode_threads): all threads
    where nothing watches the load, the idle ones where the worker does."""
    from dragonfarm_core.inference import worker_decode
    from dragonfarm_core.inference.worker_step import add_row_copies
    from dragonfarm_core.rundir import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    model = AutoModelForCausalLM.from_pretrained(bundled_model_path(), dtype=torch.float32)
    assert add_row_copies(model) > 0
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(worker_decode, "_other_load", None)
        assert worker_decode.decode_threads(model) == 2
        load = threads.OtherLoad()
        monkeypatch.setattr(worker_decode, "_other_load", load)
        monkeypatch.setattr(threads, "usable_cores", lambda: 2)
        for busy, expected in ((0.0, 2), (0.3, 2), (0.8, 1), (1.9, 1)):
            load.busy = busy
            assert worker_decode.decode_threads(model) == expected
        assert worker_decode.decode_threads(model, rows=4) == 1  # a small model's batch
        assert worker_decode.decode_threads(model, rows=8) == 2
    finally:
        torch.set_num_threads(before)
