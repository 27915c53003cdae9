"""One new token per row through a Llama- or Qwen2-shaped model with few ops: the decode loop's
step after the prompt (`worker_decode.decode`).

    step = DecodeStep.build(model, cache, prompt_len, total_len)   # None: use model.forward
    logits = step(tokens, positions, slot, mask)                   # [rows, vocab]

`model.forward` pays, for every token and layer, for module calls, a cache object that grows
by concatenation, mask and position bookkeeping and generic attention dispatch. This step
reads the same weights and does only the arithmetic: RMSNorm as one fused op, the rotary
embedding from the model's own rotary module once per token (shared by the layers, its scaling
included), keys and values written into buffers allocated once for the whole reply, and
`scaled_dot_product_attention` over the filled part. A peft LoRA layer is inlined as peft
computes it (`Projection`), or called as a module where it is of another kind. Greedy replies are `generate()`'s token for token
(tests/inference/test_decode.py, test_worker_step.py). Figures (quiet 2-core VM, batch 1,
greedy, tokens/s, the same loop through model.forward against this step): the bundled model on
one thread 196-203 -> 234-240 in float32 and 238-291 -> 447-495 in float16 (where this step also
attends in float32); the SmolLM2-135M shape in float16 on two threads 36.2 -> 42.3-46.4 (its
time is in the matrix products).

Architectures it does not know (another model_type, sliding-window attention, a norm or
activation of another kind) get None, and the loop keeps calling `model.forward`.

Imports torch: only the worker process and the trainers import this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# The families whose decoder layer is exactly: RMSNorm, q/k/v projections (Qwen2's with a
# bias), rotary embedding on q and k, grouped-query attention, o projection, residual, RMSNorm,
# SiLU-gated MLP, residual; then a final RMSNorm and the LM head. (Gemma scales its embeddings
# and norms differently; Qwen3 normalises q and k; Mistral slides its attention window.)
FAMILIES = {"llama", "qwen2"}
NORMS = {"LlamaRMSNorm", "Qwen2RMSNorm"}


Lora = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None", float]  # A, B, B's bias, scale


@dataclass(frozen=True)
class Projection:
    """One linear layer as the step computes it: its weight and bias, plus what each active
    LoRA adapter adds as peft's `lora.Linear.forward` adds it (`B(A(x)) * scaling`, x cast to
    the adapter's dtype, the sum cast back). A layer of another kind (DoRA or another variant,
    dropout in training mode, an adapter merged but switched off, which peft unmerges on its
    next call) is called as a module. Inlined, a LoRA layer costs 4 ops instead of peft's
    forward: on the bundled model with an adapter on every linear layer (a GRPO step's 16
    rollouts, bench/grpo_rollout.py) the step ran 1.05x model.forward's speed calling the
    layers, 1.22x with them inlined."""

    weight: Any  # a tensor; None when `module` is called instead
    bias: torch.Tensor | None = None
    loras: tuple[Lora, ...] = ()
    module: nn.Module | None = None

    @classmethod
    def of(cls, module: Any) -> Projection:
        if type(module) is nn.Linear:
            return cls(module.weight, module.bias)
        base = getattr(module, "base_layer", None)
        if type(base) is not nn.Linear or not hasattr(module, "lora_A"):
            return cls(None, module=module)
        if module.disable_adapters:
            return cls(None, module=module) if module.merged else cls(base.weight, base.bias)
        if module.merged:
            return cls(base.weight, base.bias)
        loras = []
        for name in module.active_adapters:
            if name not in module.lora_A:
                continue
            a, b, dropout = module.lora_A[name], module.lora_B[name], module.lora_dropout[name]
            plain = type(a) is nn.Linear and type(b) is nn.Linear
            if (
                not plain
                or name in getattr(module, "lora_variant", {})
                or (dropout.training and not isinstance(dropout, nn.Identity))
                or not getattr(module, "cast_input_dtype_enabled", True)
            ):
                return cls(None, module=module)
            loras.append((a.weight, b.weight, b.bias, module.scaling[name]))
        return cls(base.weight, base.bias, tuple(loras))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.module is not None:
            return self.module(x)
        out = F.linear(x, self.weight, self.bias)
        if not self.loras:
            return out
        dtype = out.dtype
        for a, b, b_bias, scaling in self.loras:
            x = x.to(a.dtype)
            out = out + F.linear(F.linear(x, a), b, b_bias) * scaling
        return out.to(dtype)


def _norm(module: Any, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), module.weight, module.variance_epsilon)


def base_model(model: Any) -> Any:
    """The transformers model inside a DDP wrapper and a peft wrapper."""
    model = getattr(model, "module", model)  # DistributedDataParallel
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def supported(model: Any) -> bool:
    """Whether `model` (its transformers model) has the shape this step computes."""
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if getattr(config, "model_type", None) not in FAMILIES or inner is None:
        return False
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "use_sliding_window", 0):
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or []):
        return False
    norms = [inner.norm] + [
        n for layer in inner.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)
    ]
    return all(type(n).__name__ in NORMS for n in norms) and hasattr(inner, "rotary_emb")


@dataclass
class DecodeStep:
    model: Any  # the transformers model (LlamaForCausalLM or Qwen2ForCausalLM)
    heads: int
    kv_heads: int
    head_dim: int
    keys: list[torch.Tensor]  # per layer [rows, kv_heads, total_len, head_dim]
    values: list[torch.Tensor]
    layers: list[tuple[Projection, ...]]  # per layer q, k, v, o, gate, up, down
    head: Projection

    @classmethod
    def build(cls, model: Any, cache: Any, filled: int, total_len: int) -> DecodeStep | None:
        """A step for `model` whose buffers hold `cache` (the prompt's keys and values, `filled`
        positions) and room up to `total_len`; None when the model's shape is not one it knows."""
        model = base_model(model)
        if not supported(model):
            return None
        config = model.config
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        for layer in cache.layers:
            k, v = layer.keys, layer.values
            rows = k.shape[0]
            # On a CPU, attention in half precision is slow: torch's CPU kernel took 150 us a
            # call in float16 against 18 in float32 (bundled shape, 200 positions, one
            # thread). So there keys and values are kept, and attention done, in float32.
            dtype = torch.float32 if k.device.type == "cpu" else k.dtype
            for filled_part, out in ((k, keys), (v, values)):
                buffer = filled_part.new_empty(rows, kv_heads, total_len, head_dim, dtype=dtype)
                buffer[:, :, :filled] = filled_part
                out.append(buffer)
        layers = [
            tuple(Projection.of(m) for m in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                             layer.self_attn.v_proj, layer.self_attn.o_proj,
                                             layer.mlp.gate_proj, layer.mlp.up_proj,
                                             layer.mlp.down_proj))
            for layer in model.model.layers
        ]  # fmt: skip
        head = Projection.of(model.lm_head)
        return cls(model, heads, kv_heads, head_dim, keys, values, layers, head)

    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, slot: int, mask: torch.Tensor
    ) -> torch.Tensor:
        """Logits [rows, vocab] for `tokens` [rows, 1] at `positions` [rows, 1], written to
        cache position `slot`; `mask` [rows, >slot] is True where a position holds a token."""
        inner = self.model.model
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        rows, length = tokens.shape[0], slot + 1
        x = inner.embed_tokens(tokens)  # [rows, 1, hidden]
        dtype = self.keys[0].dtype  # of the rotation and attention
        cos, sin = inner.rotary_emb(x.to(dtype), positions)  # [rows, 1, dim]
        # transformers' x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]: the sign
        # goes into sin once a token, [x2, x1] is a roll (4 ops a layer instead of 7).
        half = dim // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        cos, sin = cos[:, None], sin[:, None]  # [rows, 1, 1, dim]: over heads
        visible = mask[:, None, None, :length].bool()
        for i, layer in enumerate(inner.layers):
            q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj = self.layers[i]
            h = _norm(layer.input_layernorm, x)
            q = q_proj(h).view(rows, 1, heads, dim).transpose(1, 2)
            k = k_proj(h).view(rows, 1, kv_heads, dim).transpose(1, 2)
            v = v_proj(h).view(rows, 1, kv_heads, dim).transpose(1, 2)
            qk = torch.cat((q, k), dim=1).to(dtype)  # q and k rotated together
            qk = qk * cos + qk.roll(half, dims=-1) * sin
            self.keys[i][:, :, slot : slot + 1] = qk[:, heads:]
            self.values[i][:, :, slot : slot + 1] = v
            out = F.scaled_dot_product_attention(
                qk[:, :heads],
                self.keys[i][:, :, :length],
                self.values[i][:, :, :length],
                attn_mask=visible,
                enable_gqa=heads != kv_heads,
            )
            out = out.transpose(1, 2).reshape(rows, 1, heads * dim).to(x.dtype)
            x = x + o_proj(out)
            h = _norm(layer.post_attention_layernorm, x)
            x = x + down_proj(F.silu(gate_proj(h)) * up_proj(h))
        return self.head(_norm(inner.norm, x))[:, -1, :]
