"""The local inference worker: holds models in memory and answers requests over stdin/stdout.

    python -m dragonfarm_core.inference.worker [--device auto|cuda|mps|cpu] [--dtype auto|...]

With its decode loop (`worker_decode`, shared with the trainers' samples and rollouts), the only
inference code that imports torch, transformers and peft; `local.py` starts it as a subprocess. Requests arrive one JSON object per line on stdin; events go back one JSON object
per line on the original stdout, which is set aside at start so that anything a library prints
lands in the log (stderr) instead of corrupting the protocol.

    {"id": 1, "op": "generate", "model": {...ModelSpec}, "conversations": [[...]],
     "sampling": {...}, "stream": true}
    {"id": 2, "op": "status"}
    -> {"event": "ready", ...} once, then per request: {"id", "event": "token", "text"} (streamed
       pieces), {"id", "event": "alive"} (heartbeats during batches), and finally
       {"id", "event": "done", "texts": [...], "replies": [{finish_reason, prompt_tokens,
       completion_tokens}, ...]} or {"id", "event": "error", "error": "..."}

The last two models stay loaded (least recently used goes first), so switching between a run
and another, or between a run and its base, costs no reload. On a CPU where torch has AVX2 or
AVX-512 kernels "auto" loads a model of `worker_decode.HALF_PRECISION_FROM` parameters or more
in half precision (bfloat16 on a CPU with bf16 instructions, float16 elsewhere) and a smaller
one, such as the bundled model, in float32; a float32 or bfloat16 model gets float16 copies of
its matrices for one-row steps (`worker_step.add_row_copies`: chat reads float16, the prompt and
batches the model's own weights; figures in worker_decode), decoded on the cores other
processes leave idle (`worker_decode.decode_threads`). With those copies, once the request that
loaded the model is answered, the worker compiles chat's one-row step in a background thread
(`worker_step.warm_compiled`; seconds to a minute, during which replies run on the uncompiled
step, slower while the compiler holds Python's lock) unless DRAGONFARM_COMPILE_DECODE=0 or no
C++ compiler is on PATH (`compiles_decode`). Without copies, in float32, the base is the run's
model with its adapter disabled in place; with them, or in half precision on a CPU, the run's
adapter is merged into its weights at load and the base is held as a model of its own (see
`Models.merges_at_load`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import queue
import shutil
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterator
from typing import IO, Any

import psutil

from dragonfarm_core.inference.protocol import cut_at_stop

BATCH_SIZE = 16
HELD_MODELS = 2
HEARTBEAT_S = 1.0
# "0" keeps chat's one-row step uncompiled (worker_step.warm_compiled).
COMPILE_ENV = "DRAGONFARM_COMPILE_DECODE"


class Channel:
    """The protocol stream: the process's real stdout, kept apart from library prints."""

    def __init__(self) -> None:
        self.out: IO[str] = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # from now on fd 1 (C code, print) goes to the log
        sys.stdout = sys.stderr

    def send(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event, ensure_ascii=False) + "\n")
        self.out.flush()


def pick_device(device: str, dtype: str) -> tuple[str, Any]:
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            device = "cuda"
        elif torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"
    if dtype == "auto":
        if device == "cuda":
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        else:
            # On a CPU float32, and float16 for the larger models (`cpu_half_from`).
            dtype = "float16" if device == "mps" else "float32"
    return device, getattr(torch, dtype)


def cpu_half_from(device: str, dtype: str) -> int | None:
    """With `--dtype auto` on a CPU whose torch has AVX2 or AVX-512 kernels: the parameter
    count from which a model loads in half precision (worker_decode.HALF_PRECISION_FROM); the
    smaller ones load in float32 with float16 copies for one row (`Models.row_copies_for`).
    None elsewhere: without those kernels float16 ran at half float32's speed, and other CPUs
    were not measured."""
    import torch

    from dragonfarm_core.inference.worker_decode import HALF_PRECISION_FROM

    if device != "cpu" or dtype != "auto":
        return None
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX"):
        return None
    return HALF_PRECISION_FROM


def cpu_half_dtype() -> Any:
    """The half precision `cpu_half_from`'s models load in: bfloat16 (with float16 copies for
    one-row steps) on a CPU with bf16 instructions, float16 on others (worker_decode)."""
    import torch

    from dragonfarm_core.memory_estimate import cpu_has_bf16

    return torch.bfloat16 if cpu_has_bf16() else torch.float16


def compiles_decode() -> bool:
    """Whether the worker compiles the one-row step of a model with row copies: unless
    DRAGONFARM_COMPILE_DECODE is 0, where a C++ compiler is on PATH (inductor's CPU kernels are
    C++, built by the compiler in CXX, else c++, g++ or clang++)."""
    if os.environ.get(COMPILE_ENV, "1").strip() == "0":
        return False
    names = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    return any(name and shutil.which(name) for name in names)


def warm_in_background(model: Any) -> threading.Thread:
    """Compile `model`'s one-row step in a daemon thread (worker_step.warm_compiled) for one
    thread and for this thread's count (a new thread's own count is whatever was set last); a
    failure is logged and leaves the uncompiled step in use."""
    import torch

    from dragonfarm_core.inference.worker_step import warm_compiled

    threads = (1, torch.get_num_threads())

    def warm() -> None:
        start = time.monotonic()
        try:
            warm_compiled(model, threads)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: chat keeps working
            print(f"decode step not compiled ({type(exc).__name__}: {exc})", file=sys.stderr)
            return
        print(f"decode step compiled in {time.monotonic() - start:.1f} s", file=sys.stderr)

    thread = threading.Thread(target=warm, name="compile-decode-step", daemon=True)
    thread.start()
    return thread


class Models:
    """The loaded models, least recently used first; at most HELD_MODELS of them."""

    def __init__(
        self, device: str, dtype: Any, half_from: int | None = None, half_dtype: Any = None
    ) -> None:
        import torch

        self.device, self.dtype = device, dtype
        self.half_from = half_from  # models this large load in half precision (cpu_half_from)
        self.half_dtype = half_dtype or torch.float16  # which (cpu_half_dtype)
        self.sizes: dict[str, int | None] = {}  # parameters of each base, from its config
        self.held: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()
        self.loads = 0
        # Models whose half-precision values overflowed: loaded in float32 from then on.
        self.full_precision: set[tuple] = set()
        self.to_compile: list[Any] = []  # loaded with row copies, not yet compiling
        self.compiling: list[threading.Thread] = []  # warm_in_background's threads

    def merges_at_load(self, spec: dict[str, Any]) -> bool:
        """Whether a run's adapter goes into its weights at load (merge_and_unload).

        Half precision on a CPU: unmerged, LoRA's extra matmuls cost the 135M shape 28 % of its
        decode speed (17.8 against 24.7 tokens/s merged, bench/decode.py's model), and merging
        and unmerging half-precision weights in place each time a request switches between the
        run and its base would let rounding drift into the base. So the merge is done once, and
        the base is an entry of its own (two half-precision copies take what one float32 copy
        took). So too for a model with row copies (`row_copies_for`): merging in place would
        leave its copies behind. Other float32 models and GPUs keep the adapter in place,
        switched off for the base.
        """
        import torch

        return self.device == "cpu" and (
            self.dtype_for(spec) != torch.float32 or self.row_copies_for(spec)
        )

    def row_copies_for(self, spec: dict[str, Any]) -> bool:
        """Whether the model gets float16 copies of its matrices for one-row steps
        (worker_step.add_row_copies): under "auto" on a CPU with AVX2 or AVX-512 kernels
        (`cpu_half_from`), a model held in float32 (the smaller ones) or bfloat16, unless its
        float16 values overflowed before (then it is plain float32)."""
        import torch

        if self.half_from is None or self.key(spec) in self.full_precision:
            return False
        return self.dtype_for(spec) in (torch.float32, torch.bfloat16)

    def entry(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec as it is held: with the adapter merged at load, the base (adapter off) is
        the model without its live adapter (earlier runs' adapters still folded in)."""
        if self.merges_at_load(spec) and spec["adapter"] and not spec.get("use_adapter", True):
            return {**spec, "adapter": None, "use_adapter": True}
        return spec

    def key(self, spec: dict[str, Any]) -> tuple:
        return (spec["base"], tuple(spec["adapters"]), spec["adapter"])

    def dtype_for(self, spec: dict[str, Any]) -> Any:
        import torch

        if self.key(spec) in self.full_precision:
            return torch.float32
        if self.half_from is not None and (self.size(spec["base"]) or 0) >= self.half_from:
            return self.half_dtype
        return self.dtype

    def size(self, base: str) -> int | None:
        """The base model's parameter count from its config.json; None when it has none."""
        from dragonfarm_core.memory_estimate import Shape

        if base not in self.sizes:
            shape = Shape.read(base)
            self.sizes[base] = shape.params() if shape else None
        return self.sizes[base]

    def to_full_precision(self, spec: dict[str, Any]) -> bool:
        """Load this model in float32 from now on; False when it already is."""
        import torch

        key = self.key(spec)
        if self.dtype_for(spec) == torch.float32 and not self.row_copies_for(spec):
            return False
        self.full_precision.add(key)
        if self.held.pop(key, None) is not None:
            self.free()
        return True

    def get(self, spec: dict[str, Any]) -> tuple[Any, Any]:
        key = self.key(spec)
        if key in self.held:
            self.held.move_to_end(key)
            return self.held[key]
        while len(self.held) >= HELD_MODELS:
            self.held.popitem(last=False)
            self.free()
        self.held[key] = self.load(spec)
        self.loads += 1
        return self.held[key]

    def load(self, spec: dict[str, Any]) -> tuple[Any, Any]:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from dragonfarm_core.chat_template import DEFAULT_CHAT_TEMPLATE

        trust = bool(spec.get("trust_remote_code"))
        # A trainer that changed the tokenizer (pad token, template) saves it with the adapter.
        adapter = spec["adapter"]
        has_own = adapter and os.path.isfile(os.path.join(adapter, "tokenizer_config.json"))
        tokenizer = AutoTokenizer.from_pretrained(
            adapter if has_own else spec["base"], trust_remote_code=trust
        )
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if not tokenizer.chat_template:
            tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
        # Typed as the Module it is used as (peft wraps it, then it is moved and put in eval
        # mode): transformers types PreTrainedModel.to through functools.wraps, which mypy
        # reads as taking the model, not a device.
        dtype = self.dtype_for(spec)
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
            spec["base"], dtype=dtype, trust_remote_code=trust
        )
        for path in spec["adapters"]:  # earlier runs, folded in as the trainer did
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
        if adapter:
            model = PeftModel.from_pretrained(model, adapter)
            if self.merges_at_load(spec):
                model = model.merge_and_unload()
        model.to(self.device).eval()
        if dtype == torch.float32:
            from dragonfarm_core.inference.worker_decode import lay_out_for_decoding

            lay_out_for_decoding(model)  # on a CPU: 1.26x chat tokens/s on the bundled model
        if self.row_copies_for(spec):
            from dragonfarm_core.inference.worker_step import add_row_copies

            # Chosen by "auto": float16 for one row, float32 or bfloat16 for more. The copies
            # take half what a float32 model takes, what a bfloat16 one takes; they are left
            # out when they would fill half the free memory.
            copies = add_row_copies(model, limit_bytes=psutil.virtual_memory().available // 2)
            if copies and compiles_decode():
                self.to_compile.append(model)  # once the request that loads it is answered
        return model, tokenizer

    def compile_loaded(self) -> None:
        """Start compiling the one-row step of each model loaded since the last call (and still
        held), each in a background thread (`warm_in_background`). The worker calls this once a
        request is answered, so that compiling does not slow the reply that loaded the model."""
        held = [model for model, _ in self.held.values()]
        self.compiling = [t for t in self.compiling if t.is_alive()]
        for model in self.to_compile:
            if any(model is m for m in held):
                self.compiling.append(warm_in_background(model))
        self.to_compile = []

    def free(self) -> None:
        import torch

        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "device": self.device,
            "dtype": str(self.dtype),
            "float16_from_parameters": self.half_from,  # the name older clients read
            "half_precision": str(self.half_dtype),
            "loaded": [{"base": b, "adapters": list(a), "adapter": ad} for b, a, ad in self.held],
            "loads": self.loads,
            "compiled_steps": sum(compiled(model) for model, _ in self.held.values()),
            "compiling": len(self.to_compile) + sum(t.is_alive() for t in self.compiling),
        }


def compiled(model: Any) -> bool:
    """Whether `model`'s one-row step runs compiled (worker_step.warm_compiled has finished)."""
    from dragonfarm_core.inference.worker_step import COMPILED_STEP, base_model

    return getattr(base_model(model), COMPILED_STEP, None) is not None


class Dropped(Exception):
    """The caller cancelled the request being answered ({"op": "cancel", "id": ...})."""


class Requests:
    """The requests on stdin, read by a thread so that a cancel arrives while a reply is
    decoded: cancels are set aside in `cancelled`, the rest queued in order."""

    def __init__(self, lines: IO[str]) -> None:
        self.cancelled: set[Any] = set()
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, args=(lines,), daemon=True, name="requests").start()

    def _read(self, lines: IO[str]) -> None:
        for line in lines:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("op") == "cancel":
                self.cancelled.add(request.get("id"))
            else:
                self.queue.put(request)
        self.queue.put(None)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while (request := self.queue.get()) is not None:
            yield request


# Where a decode loop looks for its request's cancel (`serve` sets it); none outside serve.
_requests: Requests | None = None


def check_cancelled(rid: Any) -> None:
    if _requests is not None and rid in _requests.cancelled:
        raise Dropped(f"request {rid} was cancelled by its caller")


def make_streamer(tokenizer: Any, channel: Channel, rid: int, stream: bool) -> Any:
    """Streams decoded pieces for one conversation, or sends heartbeats for a batch; either
    stops the decode loop (raising Dropped) once the request is cancelled."""
    from transformers import TextStreamer
    from transformers.generation.streamers import BaseStreamer

    class Pieces(TextStreamer):
        sent = False

        def put(self, value: Any) -> None:
            check_cancelled(rid)
            super().put(value)

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text:
                self.sent = True
                channel.send({"id": rid, "event": "token", "text": text})

    class Heartbeat(BaseStreamer):
        last, sent = 0.0, False  # a batch streams no pieces

        def put(self, value: Any) -> None:
            check_cancelled(rid)
            if time.monotonic() - self.last > HEARTBEAT_S:
                self.last = time.monotonic()
                channel.send({"id": rid, "event": "alive"})

        def end(self) -> None:
            pass

    if stream:
        return Pieces(tokenizer, skip_prompt=True, skip_special_tokens=True)
    return Heartbeat()


def adapter_mode(model: Any, spec: dict[str, Any], dtype: Any) -> Any:
    """A context in which the live adapter is on (merged into the weights) or off (the base).

    Unmerged, LoRA adds two small matmuls to every adapted layer, which on a CPU costs a small
    model several times its decode speed; merged, it costs nothing. peft unmerges by itself
    while the adapter is disabled. Only float32 weights are merged: merging and unmerging
    half-precision weights over and over would let rounding drift into the base.
    """
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    if not spec["adapter"]:
        return contextlib.nullcontext()
    if not spec["use_adapter"]:
        return model.disable_adapter()
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if dtype == torch.float32 and layers and not all(m.merged for m in layers):
        model.merge_adapter()
    return contextlib.nullcontext()


def decoding(model: Any, sampling: dict[str, Any]) -> Any:
    """The request's settings over the model's generation config; temperature 0 is greedy."""
    from dragonfarm_core.inference.worker_decode import Decoding

    bias = tuple((int(t), float(b)) for t, b in sampling.get("logit_bias") or ())
    return Decoding.from_model(model, sampling["temperature"], sampling["top_p"], bias)


@contextlib.contextmanager
def seeded(seed: int | None, device: str) -> Iterator[None]:
    """Sampling inside draws from `seed` (the same request gives the same replies), or from
    the worker's running random state when seed is None. That state is set aside and put
    back, so a seeded request leaves the unseeded ones after it as random as before."""
    if seed is None:
        yield
        return
    import torch

    # fork_rng keeps the CPU state and, on CUDA, every GPU's; an MPS state is reseeded only.
    with torch.random.fork_rng(devices=None if device == "cuda" else []):
        torch.manual_seed(seed)
        yield


def generate(models: Models, request: dict[str, Any], channel: Channel) -> list[str]:
    """The texts of `answer`'s replies."""
    return [r["text"] for r in answer(models, request, channel)]


def answer(models: Models, request: dict[str, Any], channel: Channel) -> list[dict[str, Any]]:
    """Replies to the request's conversations (`reply`'s dicts), in order, in batches of
    BATCH_SIZE.

    A model whose half-precision values overflow (non-finite logits) is reloaded in float32
    and the request is answered again, unless part of a reply was already streamed: then the
    request fails saying so, and the next one gets the float32 model."""
    from dragonfarm_core.inference.worker_decode import NonFiniteLogits

    spec = models.entry(request["model"])
    sent: list[Any] = []
    try:
        return generate_once(models, spec, request, channel, sent)
    except NonFiniteLogits as e:
        if not models.to_full_precision(spec):
            raise
        if any(s.sent for s in sent):
            raise NonFiniteLogits(
                f"{e} The model is reloaded in float32 for the next request: send it again."
            ) from e
        print(f"{e} Reloading the model in float32 and answering again.", file=sys.stderr)
        return generate_once(models, spec, request, channel, [])


class StopTexts:
    """transformers' StopStringCriteria for a batch's stop texts, remembering after how many
    new tokens each row met one (its completion_tokens)."""

    def __init__(self, tokenizer: Any, texts: list[str], prompt_len: int, rows: int) -> None:
        from transformers import StopStringCriteria

        self.criteria = StopStringCriteria(tokenizer, texts)
        self.prompt_len = prompt_len
        self.ended_at: list[int | None] = [None] * rows

    def __call__(self, ids: Any) -> Any:
        met = self.criteria(ids, None)
        for row in met.nonzero().flatten().tolist():
            if self.ended_at[row] is None:
                self.ended_at[row] = ids.shape[1] - self.prompt_len
        return met


def reply(
    text: str, tokens: list[int], stop: list[int], stop_texts: list[str], ended_at: int | None,
    prompt_tokens: int,
) -> dict[str, Any]:  # fmt: skip
    """One reply as the worker sends it: its text (cut before a stop text, stripped), why it
    ended ("stop" or "length": max_new_tokens) and its token counts."""
    text, cut = cut_at_stop(text, stop_texts)
    ends = [i + 1 for i, t in enumerate(tokens) if t in stop][:1]
    ends += [] if ended_at is None else [ended_at]
    return {
        "text": text.strip(),
        "finish_reason": "stop" if ends or cut else "length",
        "prompt_tokens": prompt_tokens,
        "completion_tokens": min(ends, default=len(tokens)),
    }


def generate_once(
    models: Models,
    spec: dict[str, Any],
    request: dict[str, Any],
    channel: Channel,
    sent: list[Any],
) -> list[dict[str, Any]]:
    import torch

    from dragonfarm_core.chat_template import stop_ids
    from dragonfarm_core.inference.worker_decode import cpu_threads, decode

    model, tokenizer = models.get(spec)
    settings, stop = decoding(model, request["sampling"]), stop_ids(model, tokenizer)
    max_new = request["sampling"]["max_new_tokens"]
    stop_texts = list(request["sampling"].get("stop") or [])
    prompts = [
        tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
        for c in request["conversations"]
    ]
    # Similar lengths share a batch, so little of it is padding; replies go back in order.
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    stream = bool(request.get("stream")) and len(prompts) == 1
    replies: list[dict[str, Any]] = [{}] * len(prompts)
    with seeded(request["sampling"].get("seed"), models.device):
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start : start + BATCH_SIZE]
            inputs = tokenizer(
                [prompts[i] for i in chunk],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            ).to(models.device)
            streamer = make_streamer(tokenizer, channel, request["id"], stream)
            sent.append(streamer)
            ids = inputs["input_ids"]
            until = StopTexts(tokenizer, stop_texts, *ids.shape[::-1]) if stop_texts else None
            with (
                torch.inference_mode(),
                adapter_mode(model, spec, models.dtype_for(spec)),
                cpu_threads(model, len(chunk)),
            ):
                new_tokens = decode(
                    model, ids, inputs["attention_mask"], settings,
                    max_new_tokens=max_new, stop=stop, pad_id=tokenizer.pad_token_id,
                    streamer=streamer, until=until,
                )  # fmt: skip
            texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            prompt_tokens = inputs["attention_mask"].sum(-1).tolist()
            for row, i in enumerate(chunk):
                replies[i] = reply(
                    texts[row], new_tokens[row].tolist(), stop, stop_texts,
                    None if until is None else until.ended_at[row], prompt_tokens[row],
                )  # fmt: skip
    return replies


def describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    if "out of memory" in text.lower():
        return (
            "The model ran out of memory: lower max_new_tokens, send fewer prompts at once, "
            f"or use a smaller model or dtype. ({text})"
        )
    return text


def serve(channel: Channel, models: Models) -> None:
    global _requests
    _requests = Requests(sys.stdin)
    for request in _requests:
        rid = request.get("id")
        try:
            if request.get("op") == "status":
                channel.send({"id": rid, "event": "done", "status": models.status()})
            elif request.get("op") == "generate":
                replies = answer(models, request, channel)
                texts = [r.pop("text") for r in replies]
                channel.send({"id": rid, "event": "done", "texts": texts, "replies": replies})
            else:
                channel.send(
                    {"id": rid, "event": "error", "error": f"unknown op {request.get('op')!r}"}
                )
        except Dropped as e:  # the caller waits for this answer, then sends the next
            print(str(e), file=sys.stderr)
            channel.send({"id": rid, "event": "error", "error": str(e)})
        except Exception as e:  # the worker lives on; the caller gets the reason
            print(f"request {rid} failed", file=sys.stderr)
            traceback.print_exc()
            channel.send({"id": rid, "event": "error", "error": describe(e)})
        models.compile_loaded()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="dragonfarm's local inference worker")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "mps", "cpu"])
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"]
    )
    args = parser.parse_args(argv)
    channel = Channel()
    device, dtype = pick_device(args.device, args.dtype)
    if device == "cpu":
        from dragonfarm_core.inference.worker_decode import watch_other_load

        watch_other_load()  # chat's one-row steps decode on the cores others leave idle
    models = Models(device, dtype, cpu_half_from(device, args.dtype), cpu_half_dtype())
    channel.send({"event": "ready", **models.status()})
    serve(channel, models)


if __name__ == "__main__":
    main()
