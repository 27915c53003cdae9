"""Load the model a run trains, fold in earlier adapters, add the new LoRA, and compute the loss.

The loss runs the model body once and applies the LM head only at positions whose label is
not masked: on instruction data most positions are prompt or padding, and the head (vocab x
hidden) is often the largest matmul of a small model.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from dragonfarm_core import memory_estimate
from dragonfarm_core.rundir.train_config import ModelSpec
from dragonfarm_core.settings import Lora, SettingsError
from dragonfarm_core.trainers.common import ModelLoadError
from dragonfarm_core.trainers.placement import Placement
from dragonfarm_core.trainers.sft_data import IGNORE

LOAD_ERRORS = (OSError, ValueError, KeyError, ImportError)


def load_tokenizer(spec: ModelSpec) -> Any:
    """The base model's fast tokenizer, with a pad token (the EOS token when it has none)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            spec.base, revision=spec.revision, trust_remote_code=spec.trust_remote_code
        )
    except LOAD_ERRORS as exc:
        raise ModelLoadError(
            f"Could not load the tokenizer of {spec.name} from {spec.base}: {exc}"
        ) from exc
    if not tokenizer.is_fast:
        raise ModelLoadError(
            f"{spec.name} has only a slow (Python) tokenizer; dragonfarm needs a "
            "fast tokenizer (tokenizer.json) to mask prompts by offsets."
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _quantization(placement: Placement) -> Any:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        raise ModelLoadError(
            "Hardware.load_in_4bit needs bitsandbytes: pip install "
            "bitsandbytes (on a CUDA machine), or set load_in_4bit=False."
        ) from exc
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=placement.dtype,
    )


def load_model(spec: ModelSpec, placement: Placement, load_in_4bit: bool) -> Any:
    """The base causal LM on its device, with `spec.adapters` merged in, in order."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": placement.dtype}
    if load_in_4bit:
        kwargs.update(
            quantization_config=_quantization(placement), device_map={"": placement.device}
        )
    try:
        # Typed as the Module it is used as: transformers types PreTrainedModel.to through
        # functools.wraps, which mypy reads as taking the model, not a device.
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
            spec.base, revision=spec.revision, trust_remote_code=spec.trust_remote_code, **kwargs
        )
    except LOAD_ERRORS as exc:
        raise ModelLoadError(f"Could not load {spec.name} from {spec.base}: {exc}") from exc
    if not load_in_4bit:
        model.to(placement.device)
    for path in spec.adapters:
        try:
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
        except LOAD_ERRORS as exc:
            raise ModelLoadError(
                f"Could not fold the adapter {path} into {spec.name}: {exc}. "
                "Was that run trained on the same base model?"
            ) from exc
    return model


def add_lora(
    model: Any, lora: Lora, seed: int, gradient_checkpointing: bool, quantized: bool
) -> Any:
    """Wrap the model with a fresh LoRA adapter (float32 weights); the base stays frozen."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model.config.use_cache = False
    if quantized:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gradient_checkpointing
        )
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    targets = "all-linear" if lora.target_modules == "auto" else list(lora.target_modules)
    config = LoraConfig(
        r=lora.r,
        # peft annotates lora_alpha as int but only divides it by r: a float alpha works as given.
        lora_alpha=lora.alpha,  # type: ignore[arg-type]
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(seed)  # the adapter's initial weights follow the run's seed
    try:
        # autocast_adapter_dtype keeps LoRA weights in float32 over a bf16/fp16 base.
        return with_lean_mlp(
            with_lean_lora(
                with_fast_dropout(get_peft_model(model, config, autocast_adapter_dtype=True))
            )
        )
    except ValueError as exc:
        names = sorted(
            {
                n.rsplit(".", 1)[-1]
                for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear)
            }
        )
        raise SettingsError(
            f"Lora.target_modules {lora.target_modules!r} does not fit this "
            f"model ({exc}); its linear layers are {', '.join(names)}."
        ) from exc


class FastDropout(torch.nn.Dropout):
    """LoRA's input dropout with its random numbers from numpy's PCG64 on a CPU.

    torch draws a CPU dropout mask one number at a time (bernoulli_: 7.9 ms for 1.5M values on
    this 2-core machine, against 0.9 ms for numpy's PCG64 to make 1.5 MB of random bytes), and
    peft draws one for the input of every adapted layer: on the SmolLM2-135M shape (LoRA on all
    7 linear layers of 30, batches of 4 x 250 tokens) bernoulli_ took 18 % of a training step.
    Here each value gets 16 random bits: dropped where they fall below p (p rounded to a
    multiple of 1/65536: 0.05 -> 0.050003), kept and scaled by 1/(1 - that p) otherwise, and the
    backward keeps a 1-bit mask (LoraDelta) where torch's dropout keeps a 4-byte one. The bits
    come from a generator seeded from torch's, so a run's seed (and a resumed run's restored
    state) decides them. Same step, same process, torch's dropout against this one, 3 turns:
    1.15x tokens/s. Elsewhere than on a CPU it is torch's dropout. It is a torch Dropout, so
    what turns dropouts off (TRL's disable_dropout sets p to 0) turns it off too."""

    @property
    def scale(self) -> float:
        """What a kept value is multiplied by: 1 / (1 - p as the 16 bits draw it)."""
        return 1 / (1 - round(self.p * 65536) / 65536)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if x.device.type != "cpu":
            return super().forward(x)
        return torch.where(self.kept(x), x * self.scale, 0.0)  # unlike the AND, differentiable

    def kept(self, x: torch.Tensor) -> torch.Tensor:
        """A CPU mask of `x`'s shape: True where a value is kept (drawn as the class says)."""
        import numpy as np

        seed = int(torch.randint(0, 2**62, (1,)).item())
        # The generator's 64-bit outputs as they come, 4 values each: Generator.bytes copies
        # them into a bytes object, and torch needed a writable copy of that (in training,
        # 314 -> 210 ms of masks a micro-batch on the SmolLM2-135M shape, batch 4 x 215).
        bits = np.random.PCG64(seed).random_raw((x.numel() + 3) // 4)
        below = round(self.p * 65536) - 32768  # the bits, as an int16, that drop the value
        return torch.from_numpy(bits).view(torch.int16)[: x.numel()].view(x.shape) >= below


def with_fast_dropout(model: Any) -> Any:
    """`model` (a peft model) with each LoRA dropout (torch.nn.Dropout) a FastDropout."""
    for module in model.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if isinstance(dropouts, torch.nn.ModuleDict):
            for name, dropout in dropouts.items():
                if type(dropout) is torch.nn.Dropout:
                    dropouts[name] = FastDropout(dropout.p)
    return model


class LoraDelta(torch.autograd.Function):
    """One LoRA layer's addition, B(A(dropout(x))) * scaling in the adapter's float32, that
    keeps for the backward `x` as it came (bfloat16 over a bfloat16 base; one tensor for the
    layers that read it: q, k and v, gate and up) and the dropout's mask as bits. peft's
    forward keeps the dropped input cast to float32 for lora_A's gradient, in every adapted
    layer: on the SmolLM2-135M shape (LoRA on all 7 linear layers of 30, a batch of 4 x 215
    tokens) those copies were 0.5 GiB of the forward's 1.4 GiB of saved tensors. Here the
    dropped input is made again in the backward (a cast, a multiply and _kept_only: the mask
    and the scale are the forward's, so are the values). Every value is computed as peft
    computes it, in the same order."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")  # under autocast both passes compute as peft's
    def forward(ctx: Any, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                kept: torch.Tensor | None, keep_scale: float, scaling: float) -> torch.Tensor:  # fmt: skip
        low = F.linear(_dropped(x, a.dtype, kept, keep_scale), a)  # r values a token
        ctx.save_for_backward(x, a, b, None if kept is None else _packed(kept), low)
        ctx.keep_scale, ctx.scaling = keep_scale, scaling
        return F.linear(low, b) * scaling

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, a, b, packed, low = ctx.saved_tensors
        kept = None if packed is None else _unpacked(packed, x.shape)
        grad = (grad * ctx.scaling).flatten(0, -2)
        grad_b = grad.t() @ low.flatten(0, -2)
        grad_low = grad @ b
        grad_a = grad_low.t() @ _dropped(x, a.dtype, kept, ctx.keep_scale).flatten(0, -2)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad_low @ a).view(x.shape[:-1] + (a.shape[1],))
            if kept is not None:
                grad_x = _kept_only(grad_x * ctx.keep_scale, kept)
            grad_x = grad_x.to(x.dtype)
        return grad_x, grad_a, grad_b, None, None, None


def _packed(kept: torch.Tensor) -> torch.Tensor:
    """A bool mask kept for the backward as bits, 8 to a byte (np.packbits: about 40 us for one
    4 x 215 x 576 mask here; the 135M shape's masks at that batch 123 -> 15 MiB)."""
    import numpy as np

    return torch.from_numpy(np.packbits(kept.numpy()))


def _unpacked(packed: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The bool mask of `shape` that _packed packed."""
    import numpy as np

    bits = np.unpackbits(packed.numpy(), count=shape.numel())
    return torch.from_numpy(bits.view(np.bool_)).view(shape)


def _dropped(x: torch.Tensor, dtype: torch.dtype, kept: torch.Tensor | None,
             keep_scale: float) -> torch.Tensor:  # fmt: skip
    x = x.to(dtype)
    return x if kept is None else _kept_only(x * keep_scale, kept)


# The integer type of each float size, for _kept_only's bitwise AND.
_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _kept_only(x: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """`x` with zeros (+0.0) where `kept` is False, values untouched where it is True (what
    torch.where(kept, x, 0.0) gives): a bitwise AND with the mask widened to all ones. where()
    over a bool mask is not vectorized on a CPU: for the 4 x 215 x 576 float32 values of one
    layer of the SmolLM2-135M shape, 210-280 us on this 2-core machine, the AND 80-84 us
    (widening included)."""
    bits = _BITS[x.element_size()]
    return (x.view(bits) & kept.to(bits).neg_()).view(x.dtype)


def _lean_forward(layer: Any, peft_forward: Any, x: torch.Tensor, *args: Any,
                  **kwargs: Any) -> torch.Tensor:  # fmt: skip
    """A peft LoRA Linear's forward through LoraDelta where that is what peft would compute:
    gradients on, a CPU, one plain adapter active; else peft's own."""
    active = layer.active_adapters
    name = active[0] if len(active) == 1 else None
    dropout = layer.lora_dropout[name] if name in layer.lora_A else None
    plain = (
        dropout is not None
        and torch.is_grad_enabled()
        and x.device.type == "cpu"
        and not (args or kwargs or layer.disable_adapters or layer.merged)
        and name not in layer.lora_variant
        and layer.lora_B[name].bias is None
        and isinstance(dropout, (FastDropout, torch.nn.Identity))
    )
    if not plain:
        return peft_forward(x, *args, **kwargs)
    result = layer.base_layer(x)
    kept, keep_scale = None, 1.0
    if isinstance(dropout, FastDropout) and dropout.training and dropout.p > 0:
        kept, keep_scale = dropout.kept(x), dropout.scale
    delta = LoraDelta.apply(x, layer.lora_A[name].weight, layer.lora_B[name].weight, kept,
                            keep_scale, layer.scaling[name])  # fmt: skip
    return (result + delta).to(result.dtype)


def with_lean_lora(model: Any) -> Any:
    """`model` (a peft model) with each LoRA Linear over a torch Linear going through
    `_lean_forward`."""
    from peft.tuners.lora import Linear as LoraLinear

    for module in model.modules():
        if type(module) is LoraLinear and type(module.base_layer) is torch.nn.Linear:
            # on the instance: peft's own forward stays the class's, which is what it falls back on
            module.forward = functools.partial(  # type: ignore[method-assign]
                _lean_forward, module, module.forward
            )
    return model


class SiluMul(torch.autograd.Function):
    """silu(gate) * up, the gated MLP's middle, keeping only gate and up for the backward and
    making silu(gate) again there. Autograd keeps gate (silu's input), silu(gate) and up (the
    product's inputs): one intermediate-wide tensor more per token and layer, 13 % of what a
    layer of the SmolLM2-135M shape keeps. The backward runs the ops autograd runs (the
    product's two gradients, aten's silu_backward) on the same values: the same bits."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        return torch.ops.aten.silu_backward(grad * up, gate), grad * F.silu(gate)


def _lean_mlp_forward(mlp: Any, x: torch.Tensor) -> torch.Tensor:
    """A Llama-style MLP's forward, its middle through SiluMul where gradients are on (on a
    CPU, where it was measured)."""
    gate, up = mlp.gate_proj(x), mlp.up_proj(x)
    if torch.is_grad_enabled() and x.device.type == "cpu":
        return mlp.down_proj(SiluMul.apply(gate, up))
    return mlp.down_proj(mlp.act_fn(gate) * up)


def with_lean_mlp(model: Any) -> Any:
    """`model` with each MLP whose forward is Llama's, down(silu(gate(x)) * up(x)) (Llama,
    Mistral, Qwen2/3, Olmo2, Granite, ... with hidden_act silu), going through
    `_lean_mlp_forward`."""
    from transformers.activations import SiLUActivation
    from transformers.models.llama.modeling_llama import LlamaMLP

    llama = LlamaMLP.forward.__code__
    for module in model.modules():
        code = getattr(type(module).forward, "__code__", None)
        if (
            code is not None
            and (code.co_code, code.co_names) == (llama.co_code, llama.co_names)
            and isinstance(getattr(module, "act_fn", None), SiLUActivation | torch.nn.SiLU)
        ):
            # on the instance, as with_lean_lora does
            module.forward = functools.partial(_lean_mlp_forward, module)
    return model


def count_params(model: Any) -> tuple[int, int]:
    """(trainable, total) parameters; 4-bit weights are counted at their real size."""
    return model.get_nb_trainable_parameters()


def lm_head_logits(causal: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The output head on selected hidden states, with the logit transforms some families add."""
    logits = causal.get_output_embeddings()(hidden)
    config = causal.config.get_text_config()
    if scale := getattr(config, "logits_scaling", None):  # Granite divides
        logits = logits / scale
    if scale := getattr(config, "logit_scale", None):  # Cohere multiplies
        logits = logits * scale
    if cap := getattr(config, "final_logit_softcapping", None):  # Gemma caps
        logits = torch.tanh(logits / cap) * cap
    return logits


# The LM head and its loss run over slices of the learned positions whose float32 logits take
# at most this many bytes. glibc gives a block above its mmap threshold (raised as such blocks
# are freed, to 32 MiB at most) pages of its own and unmaps them when it is freed, so logits of
# a whole batch (the 135M shape: 430 positions x 49,152 x 4 bytes = 84 MB, and their float32
# copy, log-softmax and gradients) faulted their pages in afresh at every step. In 16 MiB
# slices the same step reuses its heap: bench/train_throughput.py's 135M arm (8 steps of 2 x 4
# rows) 51.6 -> 44.5 s, peak RSS 2,701 -> 2,518 MiB (8 MiB: 48.2 s, 4 MiB: 51.0 s); runs taking
# turns an hour later, 49.9 and 46.7 s against 42.7 and 44.2, 2,825 and 2,749 MiB against
# 2,614 and 2,583.
HEAD_SLICE_BYTES = 16 * 2**20


def learned_losses(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the next-token loss of each learned token, float32, [n], the (row, position) mask
    they are taken at, [rows, length - 1]).

    Runs the decoder body, gathers the hidden states that predict a learned token, and applies
    the LM head only there (in HEAD_SLICE_BYTES slices): on a small model with a large
    vocabulary the head is most of the compute, and prompt and padding positions need none of
    it. A model that several processes train (DistributedDataParallel) runs whole, through its
    own forward, which is what averages the gradients across them: there the head projects
    every position.
    """
    targets = batch["labels"][:, 1:]
    keep = targets != IGNORE
    # A padding-free batch (packed rows) has position_ids instead of an attention mask: from
    # them transformers masks each row to attend to itself only.
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        logits = model(**inputs, use_cache=False).logits[:, :-1][keep]
        return F.cross_entropy(logits.float(), targets[keep], reduction="none"), keep
    causal = model.get_base_model()
    hidden = causal.get_decoder()(**inputs, use_cache=False).last_hidden_state[:, :-1][keep]
    vocab = causal.get_output_embeddings().weight.shape[0]
    rows = max(1, HEAD_SLICE_BYTES // (4 * vocab))
    losses = [
        F.cross_entropy(lm_head_logits(causal, h).float(), t, reduction="none")
        for h, t in zip(hidden.split(rows), targets[keep].split(rows), strict=True)
    ]
    return torch.cat(losses), keep


def row_chunks(batch: dict[str, Any], kept_per_token: float) -> list[dict[str, Any]]:
    """`batch` split by rows into the chunks a CPU trainer takes through forward and backward
    one at a time (memory_estimate.cpu_chunk_rows: a chunk's kept activations, at
    `kept_per_token` bytes a token, under CHUNK_KEPT_MIB); [batch] when it stays whole. A
    padding-free batch is one row: it stays whole."""
    rows, length = batch["input_ids"].shape
    step = memory_estimate.cpu_chunk_rows(rows, length, kept_per_token)
    if step >= rows:
        return [batch]
    return [
        {k: v[i : i + step] if torch.is_tensor(v) and v.shape[:1] == (rows,) else v
         for k, v in batch.items()}
        for i in range(0, rows, step)
    ]  # fmt: skip


def label_loss(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(summed next-token loss over unmasked labels, number of those labels).

    Sum, not mean: a step divides by its own token count, so gradient accumulation weighs
    every token equally.
    """
    losses, keep = learned_losses(model, batch)
    return losses.sum(), int(keep.sum())
