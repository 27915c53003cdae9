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

A bfloat16 or float32 model on a CPU can also carry float16 copies of its matrices
(`add_row_copies`, the worker's "auto" on a CPU with AVX2 or AVX-512 kernels): a step of one row
(chat) then reads those, a batch and the prompt the model's own weights. One row reads each
weight once a token (a matrix-vector product), and torch's float16 kernel for that moved the
weights at 28 GB/s where bfloat16's moved them at 12 (the SmolLM2-135M shape's matrices, 2
threads, beyond the cache); more rows (a matrix product) are the other way round: float16's
[8 x 576] @ [576 x 1536] took 393 us, bfloat16's 98, float32's 183, and a 40-token prompt
through the 135M shape took 248 ms in float16. The figures of the pair are in worker_decode.

On those copies the step can also run compiled (`warm_compiled`: torch.compile, inductor's C++
kernels): one row's step is a few hundred ops of a few microseconds each whatever their size,
and compiled, a layer's norms, rotation, residual adds and gating run as a few fused kernels.

Architectures it does not know (another model_type, sliding-window attention, a norm or
activation of another kind) get None, and the loop keeps calling `model.forward`.

Imports torch: only the worker process and the trainers import this module.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
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


# The attribute of a transformers model that holds its float16 copies for one-row steps.
ROW_COPIES = "_dragonfarm_row_copies"
# ...and the one that holds its compiled one-row step once `warm_compiled` has compiled it.
COMPILED_STEP = "_dragonfarm_compiled_step"

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
    def of(cls, module: Any, copies: dict[Any, torch.Tensor] | None = None) -> Projection:
        """`module` as the step computes it; `copies` maps a weight to the copy read instead
        (RowCopies.single), its bias cast to the copy's dtype."""

        def read(linear: nn.Linear, loras: tuple[Lora, ...] = ()) -> Projection:
            weight = (copies or {}).get(linear.weight, linear.weight)
            bias = None if linear.bias is None else linear.bias.to(weight.dtype)
            return cls(weight, bias, loras)

        if type(module) is nn.Linear:
            return read(module)
        base = getattr(module, "base_layer", None)
        if type(base) is not nn.Linear or not hasattr(module, "lora_A"):
            return cls(None, module=module)
        if module.disable_adapters:
            return cls(None, module=module) if module.merged else read(base)
        if module.merged:
            return read(base)
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
        return read(base, tuple(loras))

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


@dataclass(frozen=True)
class Joined:
    """Projections of the same input (q, k, v; gate, up): each read in turn, or, from a stacked
    copy (`Stacked`), one product split into their parts (views, no copies)."""

    parts: tuple[Projection, ...]
    sizes: tuple[int, ...] = ()  # set when `parts` is the one stacked projection

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.sizes:
            return self.parts[0](x).split(self.sizes, dim=-1)
        return tuple(p(x) for p in self.parts)

    def side_by_side(self, x: torch.Tensor) -> torch.Tensor:
        """The parts' outputs concatenated on the last dimension."""
        if self.sizes:
            return self.parts[0](x)
        return torch.cat([p(x) for p in self.parts], dim=-1)


@dataclass(frozen=True)
class Norm:
    """An RMSNorm's weight (in the step's dtype) and epsilon, applied as one fused op."""

    weight: torch.Tensor
    eps: float

    @classmethod
    def of(cls, module: Any, dtype: torch.dtype) -> Norm:
        return cls(module.weight.to(dtype), module.variance_epsilon)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def base_model(model: Any) -> Any:
    """The transformers model inside a DDP wrapper and a peft wrapper."""
    model = getattr(model, "module", model)  # DistributedDataParallel
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def linear_layers(model: Any) -> list[Any]:
    """The modules the step reads as projections: each layer's q, k, v, o, gate, up and down,
    then the LM head (in that order)."""
    return [
        m
        for layer in model.model.layers
        for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                  layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj,
                  layer.mlp.down_proj)
    ] + [model.lm_head]  # fmt: skip


@dataclass(frozen=True)
class Stacked:
    """A float16 copy of projections that read the same input (q, k, v; gate, up), stacked
    into one matrix: one matrix-vector product instead of three or two (the SmolLM2-135M
    shape's 30 layers: 9.4 -> 8.9 ms a token). `sources` are the weights it was made of."""

    sources: tuple[Any, ...]
    weight: torch.Tensor
    bias: torch.Tensor | None
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, modules: tuple[Any, ...]) -> Stacked | None:
        if any(type(m) is not nn.Linear for m in modules):
            return None  # a LoRA layer left unmerged: each is read as it is
        biases = [m.bias for m in modules]
        if any(b is None for b in biases) and any(b is not None for b in biases):
            return None
        weight = torch.cat([m.weight.detach() for m in modules]).half().contiguous()
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases]).half()
        sizes = tuple(m.out_features for m in modules)
        return cls(tuple(m.weight for m in modules), weight, bias, sizes)

    def fits(self, modules: tuple[Any, ...]) -> bool:
        return len(modules) == len(self.sources) and all(
            getattr(m, "weight", None) is w for m, w in zip(modules, self.sources, strict=True)
        )


@dataclass(frozen=True)
class RowCopies:
    """What add_row_copies keeps on a model: float16 copies of single weights (o, down, the
    head, and any projection not stacked) and, per layer, the stacked q/k/v and gate/up."""

    single: dict[Any, torch.Tensor]  # keyed by the weight it copies
    stacked: list[tuple[Stacked | None, Stacked | None]]  # per layer: q/k/v, gate/up

    def nbytes(self) -> int:
        tensors = list(self.single.values()) + [
            s.weight for pair in self.stacked for s in pair if s is not None
        ]
        return sum(t.numel() * t.element_size() for t in tensors)


def attention_inputs(layer: Any) -> tuple[Any, ...]:
    return (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)


def mlp_inputs(layer: Any) -> tuple[Any, ...]:
    return (layer.mlp.gate_proj, layer.mlp.up_proj)


def add_row_copies(model: Any, limit_bytes: int | None = None) -> int:
    """Give a bfloat16 or float32 `model` on a CPU float16 copies of its projection weights and
    LM head, read by one-row steps (see the module's docstring), q/k/v and gate/up stacked;
    returns the bytes they take (0 when the model is not such a model or of a shape the step
    knows, or the copies would take more than `limit_bytes`). The weights must not change
    afterwards (the worker merges a run's adapter before this); an adapter left unmerged keeps
    working, its own small matrices read as they are. The copies are contiguous whatever the
    weights' layout (`lay_out_for_decoding` transposes float32 ones): torch's float16
    matrix-vector kernel reads rows."""
    inner = base_model(model)
    first = next(inner.parameters())
    dtypes = (torch.bfloat16, torch.float32)
    if first.device.type != "cpu" or first.dtype not in dtypes or not supported(inner):
        return 0
    linears = [getattr(m, "base_layer", m) for m in linear_layers(inner)]
    # Each weight once (a tied LM head is the embedding's).
    weights = list(dict.fromkeys(lin.weight for lin in linears if isinstance(lin, nn.Linear)))
    if limit_bytes is not None and 2 * sum(w.numel() for w in weights) > limit_bytes:
        return 0
    stacked = [
        (Stacked.of(attention_inputs(layer)), Stacked.of(mlp_inputs(layer)))
        for layer in inner.model.layers
    ]
    covered = {w for pair in stacked for s in pair if s is not None for w in s.sources}
    single = {
        w: w.detach().to(torch.float16, memory_format=torch.contiguous_format)
        for w in weights
        if w not in covered
    }
    copies = RowCopies(single, stacked)
    setattr(inner, ROW_COPIES, copies)
    return copies.nbytes()


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
    layers: list[tuple[Joined, Projection, Joined, Projection]]  # q/k/v, o, gate/up, down
    head: Projection
    norms: list[tuple[Norm, Norm]]  # per layer before attention, before the MLP
    final_norm: Norm
    dtype: torch.dtype  # of the hidden states: the model's, or its row copies' for one row
    compiled: Any = None  # DecodeStep.compute compiled (warm_compiled), for one row on copies

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
        # One row reads the float16 copies where the model has them (add_row_copies), unless
        # a layer is called as a module (its own weights' dtype).
        inner = model.model
        copies = getattr(model, ROW_COPIES, None) if keys[0].shape[0] == 1 else None
        if copies and any(Projection.of(m).module is not None for m in linear_layers(model)):
            copies = None
        single = copies.single if copies else None

        def joined(modules: tuple[Any, ...], stack: Stacked | None) -> Joined:
            if stack is not None and stack.fits(modules):
                return Joined((Projection(stack.weight, stack.bias),), stack.sizes)
            return Joined(tuple(Projection.of(m, single) for m in modules))

        layers = []
        for i, layer in enumerate(inner.layers):
            qkv, gate_up = copies.stacked[i] if copies else (None, None)
            layers.append((joined(attention_inputs(layer), qkv),
                           Projection.of(layer.self_attn.o_proj, single),
                           joined(mlp_inputs(layer), gate_up),
                           Projection.of(layer.mlp.down_proj, single)))  # fmt: skip
        dtype = torch.float16 if copies else inner.embed_tokens.weight.dtype
        norms = [
            (Norm.of(layer.input_layernorm, dtype), Norm.of(layer.post_attention_layernorm, dtype))
            for layer in inner.layers
        ]
        head = Projection.of(model.lm_head, single)
        compiled = getattr(model, COMPILED_STEP, None) if copies else None
        return cls(model, heads, kv_heads, head_dim, keys, values, layers, head, norms,
                   Norm.of(inner.norm, dtype), dtype, compiled)  # fmt: skip

    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, slot: int, mask: torch.Tensor
    ) -> torch.Tensor:
        """Logits [rows, vocab] for `tokens` [rows, 1] at `positions` [rows, 1], written to
        cache position `slot`; `mask` [rows, >slot] is True where a position holds a token."""
        compute = self.compiled or DecodeStep.compute
        return compute(self, tokens, positions, slot, mask)

    def compute(
        self, tokens: torch.Tensor, positions: torch.Tensor, slot: int, mask: torch.Tensor
    ) -> torch.Tensor:
        """The step itself (see __call__)."""
        inner = self.model.model
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        rows, length = tokens.shape[0], slot + 1
        x = inner.embed_tokens(tokens).to(self.dtype)  # [rows, 1, hidden]
        dtype = self.keys[0].dtype  # of the rotation and attention
        cos, sin = inner.rotary_emb(x.to(dtype), positions)  # [rows, 1, dim]
        # transformers' x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]: the sign
        # goes into sin once a token, [x2, x1] is a roll (4 ops a layer instead of 7). q, k
        # and v go through it together, v's heads with cos 1 and sin 0 (left as they are):
        # one token's q/k/v output [rows, 1, heads * dim] is already [rows, heads, 1, dim] in
        # memory, so no split, transposes or concatenation of q and k (an op costs a few
        # microseconds whatever its size: the bundled model's one-row step 1.54 -> 1.48 ms,
        # the 135M shape's 14.2 -> 14.1, medians of six turns in one process).
        half = dim // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)[:, None]
        rotated = (rows, heads + kv_heads, 1, dim)
        kept = (rows, kv_heads, 1, dim)
        cos = torch.cat((cos[:, None].expand(rotated), cos.new_ones(kept)), dim=1)
        sin = torch.cat((sin.expand(rotated), sin.new_zeros(kept)), dim=1)
        visible = mask[:, None, None, :length].bool()
        qkv_shape = (rows, heads + 2 * kv_heads, 1, dim)
        for i in range(len(self.layers)):
            qkv_proj, o_proj, gate_up_proj, down_proj = self.layers[i]
            attention_norm, mlp_norm = self.norms[i]
            qkv = qkv_proj.side_by_side(attention_norm(x)).view(qkv_shape).to(dtype)
            qkv = qkv * cos + qkv.roll(half, dims=-1) * sin
            self.keys[i][:, :, slot : slot + 1] = qkv[:, heads : heads + kv_heads]
            self.values[i][:, :, slot : slot + 1] = qkv[:, heads + kv_heads :]
            out = F.scaled_dot_product_attention(
                qkv[:, :heads],
                self.keys[i][:, :, :length],
                self.values[i][:, :, :length],
                attn_mask=visible,
                enable_gqa=heads != kv_heads,
            )
            x = x + o_proj(out.reshape(rows, 1, heads * dim).to(x.dtype))
            gate, up = gate_up_proj(mlp_norm(x))
            x = x + down_proj(F.silu(gate) * up)
        return self.head(self.final_norm(x))[:, -1, :]


# DecodeStep.compute compiled (`warm_compiled`). Measured (2026-12-06, 2 threads, greedy, 128
# new tokens after a 50-token prompt, medians of 3 turns in one process, ms a step, this step on
# the float16 copies against it compiled): the bundled model in bfloat16 with copies 1.80-1.84
# -> 0.96-1.00; the SmolLM2-135M shape 16.4-17.8 -> 12.2-14.3 (its time is in the matrix
# products: 9 ms at ~29 GB/s). What remains beside the products is dynamo checking its guards
# on the step's tensors before each call (0.4-0.6 ms on the 135M shape's 30 layers; 0.78-0.88
# ms of a 9-10 ms step on 2026-12-06's VM, ~2,000 guards an entry: 250 tensors, and the types,
# lengths and constants of the step's objects) and attention. Tried and not kept: a
# `guard_filter_fn` keeping only the tensor guards under the step object (0.42 ms) lets a step
# whose structure changed (an adapter's LoRA tuple, a Projection called as a module) run an old
# graph; keeping its lengths and constants too saves only 0.15 ms. Also tried and not kept:
# the layers' matrices and caches stacked into one tensor each, so that there are fewer to
# check (slower: writing a token into a slice of a stacked cache copied the whole cache),
# mode "max-autotune-no-cudagraphs", inductor's C++ wrapper and single-threaded kernels (no
# gain, compiling two to three times as long), dynamic=True (19.9 against 14.9 ms, session 17).
_compiled: dict[tuple, Any] = {}


def compiled_compute(model: Any) -> Any:
    """DecodeStep.compute compiled for `model`'s shape (its transformers model), shared by the
    models of that shape (a run and its base). Each shape gets a copy of the code under a name
    of its own: dynamo keeps what it has learnt (its graphs, and which sizes changed between
    calls) per function, and a second shape through the same function would turn the first
    one's sizes into symbols (slower code, and sdpa's enable_gqa refuses a symbolic bool)."""
    config = model.config
    key = tuple(
        getattr(config, name, None)
        for name in ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")
    )  # fmt: skip
    if key not in _compiled:
        source = DecodeStep.compute
        name = "compute_" + "_".join(map(str, key))
        code = source.__code__.replace(co_name=name)
        _compiled[key] = torch.compile(
            types.FunctionType(code, source.__globals__, name), fullgraph=True
        )
    return _compiled[key]


@torch.inference_mode()  # as the worker decodes: dynamo checks it (and the thread count)
def warm_compiled(model: Any, threads: Sequence[int] | None = None, prompt_len: int = 4) -> bool:
    """Compile the one-row step of `model` (a model with row copies, `add_row_copies`) and keep
    it on the model (COMPILED_STEP), where the steps built afterwards use it; False when the
    model has no copies. Compiling takes seconds to a minute or more (for both thread counts
    on a 2-core machine, the bundled model's shape 40 s the first time and 7 s when inductor's
    cache already holds it, the SmolLM2-135M shape 18 s with the cache warm), so the worker
    does it in the background after a load. Two buffer sizes and two positions each: dynamo's first compile takes every size as
    fixed, and recompiles once for the sizes it saw change; after these four calls the step
    it keeps fits every reply length. Compiled under inference mode and for each thread count
    in `threads` (default 1 and torch's current count: what `decode_threads` picks for one row
    on copies, by the load of other processes): dynamo checks both, and a step called
    otherwise compiles again."""
    from transformers import DynamicCache

    inner = base_model(model)
    if getattr(inner, ROW_COPIES, None) is None:
        return False
    compute = compiled_compute(inner)
    ids = torch.zeros(1, prompt_len, dtype=torch.long, device=next(inner.parameters()).device)
    token = ids.new_zeros(1)[:, None]  # as the loop passes it: dynamo also checks strides
    before = torch.get_num_threads()
    try:
        for count in sorted(set(threads or (1, before))):
            torch.set_num_threads(count)
            for room in (8, 24):
                cache = DynamicCache(config=inner.config)
                inner(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
                step = DecodeStep.build(inner, cache, prompt_len, prompt_len + room)
                if step is None or step.dtype != torch.float16:
                    return False
                mask = ids.new_ones(1, prompt_len + room)
                for slot in (prompt_len, prompt_len + 1):
                    compute(step, token, ids.new_tensor([[slot]]), slot, mask)
    finally:
        torch.set_num_threads(before)
    setattr(inner, COMPILED_STEP, compute)
    return True
