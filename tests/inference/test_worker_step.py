"""The trimmed decode step (`worker_step.DecodeStep`) computes what `model.forward` computes.

The bundled model's decode goes through it (test_decode.py holds those replies equal to
generate()'s); here, models built in the fixture: a Qwen2 shape (biased q/k/v projections,
grouped-query attention), a Llama shape with Llama 3's rope scaling, the bundled model with a
peft LoRA adapter (on and switched off), in left-padded batches. Greedy replies equal
generate()'s token for token and each step's logits equal model.forward's; a shape the step
does not know (Qwen3 normalises q and k) falls back to model.forward.
"""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from dragonfarm_core.inference import worker_step
from dragonfarm_core.inference.worker_decode import Decoding, decode, default_stop
from dragonfarm_core.inference.worker_step import DecodeStep
from dragonfarm_core.models import bundled_model_path

SHAPE = {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "vocab_size": 300, "max_position_embeddings": 256, "pad_token_id": 0,
         "tie_word_embeddings": False}  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def built(model_class, config):
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():  # weights large enough that the logits are far from ties
        for p in model.parameters():
            p.normal_(0, 0.08)
    return model


def qwen2():
    return built(Qwen2ForCausalLM, Qwen2Config(**SHAPE))


def llama3_scaled():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
               "rope_theta": 500000.0}  # fmt: skip
    return built(LlamaForCausalLM, LlamaConfig(**SHAPE, rope_parameters=scaling))


def padded_batch(vocab=300):
    torch.manual_seed(1)
    ids = torch.randint(1, vocab, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding of different lengths
    mask[2, :9] = 0
    return ids.masked_fill(mask == 0, 0), mask


def generated(model, ids, mask, new, stop=()):
    """generate()'s greedy reply: to `new` tokens, or each row to a token in `stop`."""
    until = {"eos_token_id": list(stop)} if stop else {"min_new_tokens": new}
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                             do_sample=False, repetition_penalty=1.0, pad_token_id=0,
                             **until)  # fmt: skip
    return out[:, ids.shape[1] :]


def ours(model, ids, mask, new, trimmed=True, stop=()):
    return decode(model, ids, mask, Decoding(), max_new_tokens=new, stop=list(stop), pad_id=0,
                  trimmed=trimmed)  # fmt: skip


def counting(monkeypatch):
    calls = []
    real = DecodeStep.__call__

    def counted(self, *args):
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(DecodeStep, "__call__", counted)
    return calls


@pytest.mark.parametrize("make", [qwen2, llama3_scaled], ids=["qwen2", "llama3-rope-scaling"])
def test_greedy_replies_are_generates_through_the_step(make, monkeypatch):
    model = make()
    ids, mask = padded_batch()
    calls = counting(monkeypatch)
    got = ours(model, ids, mask, 40)  # past the scaled rope's original 32 positions
    assert len(calls) == 39  # every token after the prompt's first
    assert torch.equal(got, generated(model, ids, mask, 40))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("make", [qwen2, llama3_scaled], ids=["qwen2", "llama3-rope-scaling"])
def test_each_steps_logits_are_model_forwards(make, dtype):
    """In float16 on a CPU the step attends in float32 (its keys and values kept so): the
    logits agree with float16's model.forward to float16's precision."""
    from transformers import DynamicCache

    model = make().to(dtype)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    ids, mask = padded_batch()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        first = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                      use_cache=True, logits_to_keep=1)  # fmt: skip
        step = DecodeStep.build(model, cache, ids.shape[1], ids.shape[1] + 8)
        assert step is not None and step.keys[0].dtype == torch.float32
        full = torch.cat([mask, torch.ones(3, 8, dtype=mask.dtype)], dim=1)
        token, pos = first.logits[:, -1].argmax(-1, keepdim=True), positions[:, -1:] + 1
        for n in range(8):
            length = ids.shape[1] + n + 1
            want = model(input_ids=token, attention_mask=full[:, :length], position_ids=pos,
                         cache=cache, use_cache=True).logits[:, -1]  # fmt: skip
            got = step(token, pos, length - 1, full)
            assert got.dtype == dtype
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
            token, pos = want.argmax(-1, keepdim=True), pos + 1


def test_a_lora_adapter_is_applied_on_and_left_out_off_merged_or_not(monkeypatch):
    from peft import LoraConfig, get_peft_model

    base = AutoModelForCausalLM.from_pretrained(bundled_model_path(), dtype=torch.float32)
    ids, mask = padded_batch(vocab=4000)
    stop = default_stop(base)
    plain = generated(base.eval(), ids, mask, 24, stop)
    config = LoraConfig(
        r=8,
        lora_alpha=16,
        init_lora_weights=False,
        target_modules=["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
    )
    torch.manual_seed(3)
    model = get_peft_model(base, config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)  # large enough to change every step (0.05 only the prompt)
    calls = counting(monkeypatch)
    tuned = ours(model, ids, mask, 24, stop=stop)
    assert calls and torch.equal(tuned, generated(model, ids, mask, 24, stop))
    assert not torch.equal(tuned, plain)  # the adapter changes the replies
    with model.disable_adapter():
        assert torch.equal(ours(model, ids, mask, 24, stop=stop), plain)
    model.merge_adapter()  # as the worker does in float32: the base weights hold the adapter
    assert torch.equal(ours(model, ids, mask, 24, stop=stop), tuned)
    with model.disable_adapter():  # peft unmerges on the layers' next call
        assert torch.equal(ours(model, ids, mask, 24, stop=stop), plain)


def test_a_shape_it_does_not_know_decodes_through_model_forward(monkeypatch):
    model = built(Qwen3ForCausalLM, Qwen3Config(**SHAPE))
    assert not worker_step.supported(model)
    ids, mask = padded_batch()
    calls = counting(monkeypatch)
    assert torch.equal(ours(model, ids, mask, 16), generated(model, ids, mask, 16))
    assert not calls


def test_trimmed_off_keeps_model_forward(monkeypatch):
    model = qwen2()
    ids, mask = padded_batch()
    calls = counting(monkeypatch)
    assert torch.equal(ours(model, ids, mask, 16, trimmed=False), ours(model, ids, mask, 16))
    assert len(calls) == 15  # only the trimmed call went through the step


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("make", [qwen2, llama3_scaled], ids=["qwen2", "llama3-rope-scaling"])
def test_a_model_steps_one_row_on_its_float16_copies(make, dtype):
    """add_row_copies: one row's step reads float16 copies of the matrices, a batch the model's
    own weights (bfloat16, or float32 laid out as the worker lays them out); both give the
    logits of the same weights in float32 to half precision."""
    from transformers import DynamicCache

    from dragonfarm_core.inference.worker_decode import lay_out_for_decoding

    model = make().to(dtype)
    reference = make()
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    if dtype == torch.float32:
        assert lay_out_for_decoding(model) > 0  # transposed weights, contiguous copies
    assert worker_step.add_row_copies(model) > 0
    copies = getattr(model, worker_step.ROW_COPIES)
    tensors = list(copies.single.values()) + [s.weight for p in copies.stacked for s in p if s]
    assert all(t.dtype == torch.float16 and t.is_contiguous() for t in tensors)
    ids, mask = padded_batch()
    for rows in (ids[:1], ids):
        n = rows.shape[0]
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(input_ids=rows, attention_mask=mask[:n], cache=cache, use_cache=True)
            step = DecodeStep.build(model, cache, ids.shape[1], ids.shape[1] + 1)
            assert step is not None
            heads = step.head.weight
            assert (step.dtype, heads.dtype) == ((torch.float16,) * 2 if n == 1 else
                                                  (dtype,) * 2)  # fmt: skip
            assert (heads is copies.single[model.lm_head.weight]) == (n == 1)
            qkv = step.layers[0][0]
            assert len(qkv.parts) == (1 if n == 1 else 3)  # one row: q, k, v stacked
            token = torch.full((n, 1), 7)
            full = torch.cat([mask[:n], torch.ones(n, 1, dtype=mask.dtype)], dim=1)
            pos = (full.cumsum(-1) - 1)[:, -1:]
            got = step(token, pos, ids.shape[1], full)
            positions = (full.cumsum(-1) - 1).masked_fill(full == 0, 1)
            want = reference(input_ids=torch.cat([rows, token], dim=1), attention_mask=full,
                             position_ids=positions).logits[:, -1]  # fmt: skip
        # The logits are about 0.1 here: float16 copies came within 1e-4, bfloat16 within 1e-3.
        torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=3e-3)


def test_row_copies_are_only_for_a_bfloat16_or_float32_model_on_a_cpu_within_the_limit():
    model = qwen2().to(torch.bfloat16)
    assert worker_step.add_row_copies(model, limit_bytes=1000) == 0  # the worker: free memory
    assert not hasattr(model, worker_step.ROW_COPIES)
    assert worker_step.add_row_copies(model, limit_bytes=10**9) > 0
    assert worker_step.add_row_copies(qwen2()) > 0  # float32
    assert worker_step.add_row_copies(qwen2().to(torch.float16)) == 0  # reads its own
    model = built(Qwen3ForCausalLM, Qwen3Config(**SHAPE)).to(torch.bfloat16)
    assert worker_step.add_row_copies(model) == 0  # a shape the step does not know


@pytest.mark.parametrize("make", [qwen2, llama3_scaled], ids=["qwen2", "llama3-rope-scaling"])
@pytest.mark.slow
def test_the_compiled_one_row_step_decodes_what_the_step_decodes(make):
    """warm_compiled compiles the one-row step on the float16 copies for every reply length at
    once: replies of two lengths afterwards (in inference mode, as the worker decodes) compile
    nothing more, and are the uncompiled step's token for token; a batch keeps the uncompiled
    step."""
    from torch._dynamo.utils import counters

    model = make().to(torch.bfloat16)
    assert not worker_step.warm_compiled(model)  # no copies yet: nothing to compile
    assert worker_step.add_row_copies(model) > 0
    ids, mask = padded_batch()
    row, row_mask = ids[:1], mask[:1]
    want = {new: ours(model, row, row_mask, new) for new in (12, 30)}
    assert worker_step.warm_compiled(model)
    compiled = getattr(model, worker_step.COMPILED_STEP)
    calls = []

    def counted(*args):
        calls.append(1)
        return compiled(*args)

    setattr(model, worker_step.COMPILED_STEP, counted)
    graphs = counters["stats"]["unique_graphs"]
    with torch.inference_mode():  # as the worker decodes
        for new, tokens in want.items():
            assert torch.equal(ours(model, row, row_mask, new), tokens)
        assert len(calls) == 12 - 1 + 30 - 1  # every step after the prompt's
        assert counters["stats"]["unique_graphs"] == graphs  # no compile after the warm-up
        batch_calls = len(calls)
        ours(model, ids, mask, 4)
    assert len(calls) == batch_calls
