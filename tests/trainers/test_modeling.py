"""Model loading, the LoRA wrap, and the loss computed only at learned positions."""

from __future__ import annotations

import pytest
import torch
from trainer_fixtures import support_conversations

from dragonfarm_core.rundir.train_config import ModelSpec
from dragonfarm_core.settings import Lora, SettingsError
from dragonfarm_core.trainers import modeling, sft_data
from dragonfarm_core.trainers.batching import collate
from dragonfarm_core.trainers.common import ModelLoadError
from dragonfarm_core.trainers.placement import Placement

CPU32 = Placement(torch.device("cpu"), torch.float32)


@pytest.fixture(scope="module")
def spec(tiny_model_dir):
    return ModelSpec(name="tiny", base=str(tiny_model_dir))


@pytest.fixture(scope="module")
def batch(spec):
    tokenizer = modeling.load_tokenizer(spec)
    conversations = [r["messages"] for r in support_conversations(6)]
    data = sft_data.encode(tokenizer, conversations, max_len=256)
    return collate(data, list(range(6)), tokenizer.pad_token_id)


def test_label_loss_matches_the_full_logits_loss(spec, batch):
    model = modeling.add_lora(
        modeling.load_model(spec, CPU32, False),
        Lora(r=4, dropout=0.0),
        seed=0,
        gradient_checkpointing=False,
        quantized=False,
    )
    with torch.no_grad():
        for p in model.parameters():  # a non-zero adapter, so LoRA is part of the forward
            if p.requires_grad:
                p.add_(0.01)
        summed, n = modeling.label_loss(model, batch)
        reference = model(**batch).loss  # transformers' loss: full logits, mean over labels
    assert n == int((batch["labels"][:, 1:] != -100).sum())
    assert float(summed) / n == pytest.approx(float(reference), rel=1e-5)


def test_the_head_in_slices_gives_the_same_loss_and_gradients(spec, batch, monkeypatch):
    """label_loss applies the LM head over slices of the learned positions (HEAD_SLICE_BYTES):
    slices of 7 positions give the loss and the gradients of one slice of them all."""
    model = modeling.add_lora(
        modeling.load_model(spec, CPU32, False), Lora(r=4, dropout=0.0), 0, False, False
    )
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.01)
    results = []
    vocab = model.get_base_model().get_output_embeddings().weight.shape[0]
    learned = int((batch["labels"][:, 1:] != -100).sum())
    for rows in (learned, 7):
        monkeypatch.setattr(modeling, "HEAD_SLICE_BYTES", rows * 4 * vocab)
        losses, keep = modeling.learned_losses(model, batch)
        assert losses.shape == (learned,) and int(keep.sum()) == learned
        summed, n = modeling.label_loss(model, batch)
        model.zero_grad()
        summed.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        results.append((losses.detach(), summed.detach(), grads))
    (whole, whole_sum, whole_grads), (sliced, sliced_sum, sliced_grads) = results
    assert torch.allclose(sliced, whole, rtol=1e-5, atol=1e-6)
    assert float(sliced_sum) == pytest.approx(float(whole_sum), rel=1e-6)
    for a, b in zip(sliced_grads, whole_grads, strict=True):  # summed in another order
        assert b.norm() > 0 and (a - b).norm() / b.norm() < 1e-5


def test_packed_rows_score_as_they_do_alone(spec):
    """Rows packed into one padding-free sequence (TRL's pack_dataset and collator, as an SFT
    run with packing trains) get the same loss as each row alone: position_ids that restart at
    each row keep it from attending to the rows before it."""
    from trl import pack_dataset
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from dragonfarm_core.trainers.sft import as_dataset

    tokenizer = modeling.load_tokenizer(spec)
    data = sft_data.encode(tokenizer, [r["messages"] for r in support_conversations(4)], 256)
    model = modeling.add_lora(modeling.load_model(spec, CPU32, False), Lora(r=4, dropout=0.0),
                              seed=0, gradient_checkpointing=False, quantized=False)  # fmt: skip
    packed = pack_dataset(as_dataset(data), 4096, "bfd")
    assert len(packed) == 1 and sorted(packed[0]["seq_lengths"]) == sorted(data.lengths)
    collator = DataCollatorForLanguageModeling(tokenizer.pad_token_id, padding_free=True,
                                               pad_to_multiple_of=16)  # fmt: skip
    batch = collator([packed[0]])
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 1
    with torch.no_grad():
        together, n = modeling.label_loss(model, batch)
        alone = [modeling.label_loss(model, collate(data, [i], tokenizer.pad_token_id))
                 for i in range(len(data))]  # fmt: skip
        # The control: one sequence of positions across the rows lets each see the others.
        seen = {**batch, "position_ids": torch.arange(batch["input_ids"].shape[1])[None]}
        mixed, _ = modeling.label_loss(model, seen)
    apart = sum(float(loss) for loss, _ in alone)
    assert n == sum(k for _, k in alone)
    assert float(together) == pytest.approx(apart, rel=1e-5)
    assert abs(float(mixed) - apart) > 20 * abs(float(together) - apart)


def test_auto_targets_every_linear_but_the_head_with_float32_adapter(spec):
    bf16 = Placement(torch.device("cpu"), torch.bfloat16)
    model = modeling.add_lora(
        modeling.load_model(spec, bf16, False),
        Lora(),
        seed=0,
        gradient_checkpointing=True,
        quantized=False,
    )
    targets = {n.rsplit(".", 1)[-1] for n in model.peft_config["default"].target_modules}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert model.get_base_model().is_activation_checkpointing
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
    n_trainable, n_total = modeling.count_params(model)
    assert n_trainable == sum(p.numel() for p in trainable) and n_total > n_trainable


def test_lora_dropout_is_the_fast_one_and_drops_p_of_the_values_scaled_as_torch_does(spec):
    model = modeling.add_lora(
        modeling.load_model(spec, CPU32, False), Lora(dropout=0.1), 0, False, False
    )
    dropouts = [d for m in model.modules() if hasattr(m, "lora_dropout")
                for d in m.lora_dropout.values()]  # fmt: skip
    assert dropouts and all(type(d) is modeling.FastDropout for d in dropouts)

    dropout = modeling.FastDropout(0.1).train()
    x = torch.rand(400, 2500, dtype=torch.float32) + 0.5  # no zeros of its own
    torch.manual_seed(1)
    out = dropout(x)
    dropped = out == 0
    assert abs(dropped.float().mean().item() - 0.1) < 0.002
    kept = ~dropped
    assert torch.equal(out[kept], x[kept] * dropout.scale)
    assert dropout.scale == pytest.approx(1 / 0.9, rel=1e-4)
    assert abs(out.mean().item() / x.mean().item() - 1) < 0.005  # the expectation is kept
    torch.manual_seed(1)
    assert torch.equal(dropout(x), out)  # torch's seed decides the mask
    assert not torch.equal(dropout(x), out)
    torch.manual_seed(2)
    mask = dropout(torch.ones(50, 50)) != 0
    x.requires_grad_(True)
    torch.manual_seed(2)
    dropout(x[:50, :50]).sum().backward()
    # the gradient: the scale where a value was kept, nothing where it was dropped
    assert torch.equal(x.grad[:50, :50], mask * torch.tensor(dropout.scale))
    assert torch.equal(dropout.eval()(x), x)  # off outside training
    bf16 = modeling.FastDropout(0.05).train()(torch.ones(1000, 1000, dtype=torch.bfloat16))
    assert bf16.dtype == torch.bfloat16 and abs((bf16 == 0).float().mean().item() - 0.05) < 0.002
    # What turns a model's dropouts off turns these off too (TRL's DPO and ORPO do it).
    from trl.trainer.utils import disable_dropout_in_model

    disable_dropout_in_model(model)
    assert all(d.p == 0 for d in dropouts)
    ones = torch.ones(100, 100)
    assert torch.equal(dropouts[0].train()(ones), ones)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_kept_only_gives_where_s_values_bit_for_bit(dtype):
    x = torch.randn(3, 50, 40).to(dtype) * 1e3
    x[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    kept = torch.rand(3, 50, 40) > 0.3
    kept[0, 0, :4] = torch.tensor([True, True, False, False])
    out = modeling._kept_only(x, kept)
    expected = torch.where(kept, x, 0.0)
    assert out.dtype == dtype
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    assert torch.equal(out.view(bits), expected.view(bits))  # NaN kept, dropped -0.0 is +0.0
    packed = modeling._packed(kept)  # what LoraDelta keeps of the mask: its bits
    assert packed.numel() == -(-kept.numel() // 8)
    assert torch.equal(modeling._unpacked(packed, kept.shape), kept)
    # a view that is not contiguous (the last dimension's stride is still 1)
    assert torch.equal(modeling._kept_only(x[:, ::2], kept[:, ::2]).view(bits),
                       expected[:, ::2].view(bits))  # fmt: skip


def test_same_seed_same_adapter_init(spec):
    def init(seed):
        model = modeling.add_lora(
            modeling.load_model(spec, CPU32, False), Lora(r=4), seed, False, False
        )
        return torch.cat([p.flatten() for p in model.parameters() if p.requires_grad])

    assert torch.equal(init(3), init(3))
    assert not torch.equal(init(3), init(4))


def test_unknown_target_module_names_the_linear_layers(spec):
    with pytest.raises(SettingsError, match="q_proj"):
        modeling.add_lora(
            modeling.load_model(spec, CPU32, False),
            Lora(target_modules=("attention_dense",)),
            0,
            False,
            False,
        )


def test_missing_model_and_adapter_are_model_errors(spec, tmp_path):
    with pytest.raises(ModelLoadError, match="tokenizer of nowhere"):
        modeling.load_tokenizer(ModelSpec(name="nowhere", base=str(tmp_path / "nowhere")))
    with pytest.raises(ModelLoadError, match="Could not fold the adapter"):
        modeling.load_model(
            ModelSpec(name="tiny", base=spec.base, adapters=(str(tmp_path / "missing"),)),
            CPU32,
            False,
        )


def test_adapters_are_folded_in_order(spec, tmp_path):
    first = modeling.add_lora(modeling.load_model(spec, CPU32, False), Lora(r=4), 0, False, False)
    with torch.no_grad():
        for name, p in first.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    first.save_pretrained(tmp_path / "a")
    merged = first.merge_and_unload()
    folded = modeling.load_model(
        ModelSpec(name="tiny", base=spec.base, adapters=(str(tmp_path / "a"),)), CPU32, False
    )
    for (name, a), (_, b) in zip(
        merged.state_dict().items(), folded.state_dict().items(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-6), name


def _lean_and_own(spec, dtype, lora, checkpointing, lean_modules):
    """Two LoRA models with the same weights (B made non-zero): the first as add_lora makes
    it, the second with transformers' or peft's own forward again on `lean_modules(model)`."""
    models = []
    for lean in (True, False):
        model = modeling.add_lora(
            modeling.load_model(spec, Placement(torch.device("cpu"), dtype), False), lora, 0,
            checkpointing, False,
        )  # fmt: skip
        with torch.no_grad():
            for p in model.parameters():  # B starts at zero: make it count
                if p.requires_grad:
                    p.add_(torch.randn_like(p) * 0.02)
        modules = lean_modules(model)
        assert modules and all("forward" in vars(m) for m in modules)  # the lean forward
        if not lean:
            for m in modules:
                del m.forward  # the library's own forward again
        model.train()
        models.append(model)
    models[1].load_state_dict(models[0].state_dict())
    return models


def _trained(models, batch, autocast):
    """(saved bytes, loss, gradients) of one forward and backward of each model, each with
    the same LoRA dropout draws."""
    results = []
    for model in models:
        torch.manual_seed(3)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            saved, loss = _saved_bytes(model, batch)
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        results.append((saved, loss, grads))
    return results


def _saved_bytes(model, batch) -> tuple[int, torch.Tensor]:
    """(bytes of the distinct tensors the forward keeps for the backward, the summed loss)."""
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = modeling.label_loss(model, batch)
    return sum(storages.values()), loss


@pytest.mark.parametrize(
    ("dtype", "checkpointing", "autocast"),
    [
        (torch.bfloat16, False, False),
        (torch.float32, False, False),
        (torch.bfloat16, True, False),
        (torch.float32, True, False),
        # TRL's DPO, ORPO and GRPO call the model through accelerate's bf16 autocast
        (torch.bfloat16, False, True),
    ],
)
def test_lean_lora_trains_as_peft_does_and_keeps_less_for_the_backward(
    spec, batch, dtype, checkpointing, autocast
):
    """modeling.LoraDelta against peft's own LoRA forward: same dropout draws, same loss and
    gradients, and the copies of each adapted layer's input are not kept."""

    def lora_layers(model):
        return [m for m in model.modules() if hasattr(m, "lora_A")]

    models = _lean_and_own(spec, dtype, Lora(r=4, dropout=0.1), checkpointing, lora_layers)
    lean, peft = models
    results = _trained(models, batch, autocast)
    (lean_saved, lean_loss, lean_grads), (peft_saved, peft_loss, peft_grads) = results
    assert torch.allclose(lean_loss, peft_loss, rtol=1e-6)
    assert lean_grads.keys() == peft_grads.keys()
    for name, grad in lean_grads.items():
        assert grad is not None and grad.abs().sum() > 0, name
        error = (grad - peft_grads[name]).norm() / peft_grads[name].norm()
        assert error < 1e-5, (name, float(error))
    if checkpointing:  # what a layer keeps is dropped and made again in the backward
        assert lean_saved <= peft_saved
    else:
        tokens = int(batch["attention_mask"].numel())
        hidden = lean.get_base_model().config.hidden_size
        # peft keeps a float32 copy of the input of every adapted layer (bfloat16 under
        # autocast); the lean forward keeps the input as it is, shared by the layers that read
        # it (q, k and v; gate and up; o: at most half as many inputs as layers, of those
        # taking the hidden size).
        n_layers = sum(1 for m in lean.modules() if hasattr(m, "lora_A")
                       and m.in_features == hidden)  # fmt: skip
        per_layer = (2 if autocast else 4) - dtype.itemsize / 2
        assert peft_saved - lean_saved >= n_layers * tokens * hidden * per_layer * 0.9
    # With the adapter off, or without gradients, peft's own forward runs.
    with lean.disable_adapter(), torch.no_grad():
        off = modeling.label_loss(lean, batch)[0]
    with peft.disable_adapter(), torch.no_grad():
        assert torch.equal(off, modeling.label_loss(peft, batch)[0])


@pytest.mark.parametrize(
    ("dtype", "autocast"),
    [(torch.bfloat16, False), (torch.float32, False), (torch.bfloat16, True)],
)
def test_lean_mlp_gives_autograds_gradients_bit_for_bit_and_keeps_less(spec, batch, dtype,
                                                                        autocast):  # fmt: skip
    """modeling.SiluMul against autograd's silu and product: the same loss and gradients,
    bit for bit, with one intermediate-wide tensor a layer and token less kept."""

    def mlps(model):
        return [m for m in model.modules() if type(m).__name__ == "LlamaMLP"]

    models = _lean_and_own(spec, dtype, Lora(r=4), False, mlps)
    results = _trained(models, batch, autocast)
    (lean_saved, lean_loss, lean_grads), (own_saved, own_loss, own_grads) = results
    assert torch.equal(lean_loss, own_loss)
    assert lean_grads.keys() == own_grads.keys()
    for name, grad in lean_grads.items():
        assert torch.equal(grad, own_grads[name]), name
    config = models[0].get_base_model().config
    tokens = int(batch["attention_mask"].numel())
    itemsize = 2 if autocast else dtype.itemsize
    fewer = config.num_hidden_layers * tokens * config.intermediate_size * itemsize
    assert own_saved - lean_saved >= 0.9 * fewer
