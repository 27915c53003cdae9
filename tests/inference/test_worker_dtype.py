"""The worker's dtype on a CPU, its half-precision models, and the float32 fallback when float16
overflows: the worker's own functions in this process, on the tiny Llama."""

from __future__ import annotations

import io
import json
import shutil

import pytest

torch = pytest.importorskip("torch")

from dragonfarm_core.inference import worker, worker_step  # noqa: E402
from dragonfarm_core.inference.protocol import Sampling  # noqa: E402
from dragonfarm_core.inference.target import resolve_target  # noqa: E402
from dragonfarm_core.inference.worker_decode import NonFiniteLogits, decode  # noqa: E402
from dragonfarm_core.memory_estimate import Shape  # noqa: E402


class Sink:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def send(self, event: dict) -> None:
        self.events.append(event)


def request(spec: dict, text: str = "My thermostat keeps dropping off Wi-Fi.", stream=False):
    return {"id": 1, "model": spec, "conversations": [[{"role": "user", "content": text}]],
            "sampling": Sampling(10, 0.0).as_dict(), "stream": stream}  # fmt: skip


def test_auto_on_a_cpu_is_float16_from_the_size_where_it_pays(monkeypatch):
    """float16 decodes one prompt of a 135M model 2.5-3.7x faster on an AVX CPU, its batches
    about as fast, but the bundled model's batches slower (worker_decode): auto picks it by the
    model's size, and only where torch has the kernels it was measured with."""
    from dragonfarm_core.inference.worker_decode import HALF_PRECISION_FROM

    assert worker.pick_device("cpu", "auto") == ("cpu", torch.float32)
    assert worker.pick_device("cpu", "float16") == ("cpu", torch.float16)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert worker.cpu_half_from("cpu", "auto") == HALF_PRECISION_FROM
    assert worker.cpu_half_from("cpu", "float32") is None  # asked for: kept
    assert worker.cpu_half_from("cuda", "auto") is None
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert worker.cpu_half_from("cpu", "auto") is None


def test_the_half_precision_is_bfloat16_with_row_copies_where_the_cpu_has_bf16(
    monkeypatch, tmp_path
):
    """With bf16 instructions the prompt and batches run in bfloat16 and one row reads float16
    copies (worker_step.add_row_copies); without them float16 does both."""
    from dragonfarm_core import memory_estimate

    real = memory_estimate.cpu_has_bf16
    for flags, want in (("avx512f avx512_bf16", torch.bfloat16), ("avx512f", torch.float16)):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"flags\t\t: fpu {flags}\n")
        monkeypatch.setattr(memory_estimate, "cpu_has_bf16", lambda path=str(cpuinfo): real(path))
        assert worker.cpu_half_dtype() == want


def test_a_model_from_the_size_loads_in_float16_merged_and_a_smaller_one_in_float32(
    tiny_run, tiny_model
):
    spec = resolve_target(str(tiny_run)).spec.as_dict()
    size = Shape.read(spec["base"]).params()
    small = worker.Models("cpu", torch.float32, half_from=size + 1)
    assert small.dtype_for(spec) == torch.float32 and small.row_copies_for(spec)
    assert small.merges_at_load(spec)  # in place, the merge would leave the copies behind
    asked = worker.Models("cpu", torch.float32)  # --dtype float32: no copies, adapter in place
    assert not asked.row_copies_for(spec) and not asked.merges_at_load(spec)
    large = worker.Models("cpu", torch.float32, half_from=size)
    assert large.dtype_for(spec) == torch.float16 and large.merges_at_load(spec)
    worker.generate(large, request(spec), Sink())
    model = next(iter(large.held.values()))[0]
    assert next(model.parameters()).dtype == torch.float16
    assert not hasattr(model, worker_step.ROW_COPIES)
    assert large.status()["float16_from_parameters"] == size


@pytest.mark.parametrize(("larger", "dtype"), [(0, torch.bfloat16), (1, torch.float32)])
def test_under_auto_the_merged_run_gets_float16_copies_and_answers_as_in_float32(
    tiny_run, tiny_model, larger, dtype
):
    """A model from the size in bfloat16, a smaller one in float32: both with the copies."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    spec = resolve_target(str(tiny_run)).spec.as_dict()
    size = Shape.read(spec["base"]).params()
    half = worker.Models("cpu", torch.float32, half_from=size + larger, half_dtype=torch.bfloat16)
    assert half.dtype_for(spec) == dtype and half.merges_at_load(spec)
    assert half.status()["half_precision"] == "torch.bfloat16"
    tuned = worker.generate(half, request(spec), Sink())
    model = next(iter(half.held.values()))[0]
    assert not any(isinstance(m, BaseTunerLayer) for m in model.modules())
    assert next(model.parameters()).dtype == dtype
    copies = getattr(model, worker_step.ROW_COPIES)
    layers = model.config.num_hidden_layers
    assert len(copies.single) == 2 * layers + 1  # o and down of each layer, and the head
    stacked = [s for pair in copies.stacked for s in pair]
    assert len(stacked) == 2 * layers and None not in stacked  # q/k/v and gate/up
    tensors = list(copies.single.values()) + [s.weight for s in stacked]
    assert {c.dtype for c in tensors} == {torch.float16}
    full = worker.Models("cpu", torch.float32)
    assert worker.generate(full, request(spec), Sink()) == tuned
    # An explicit bfloat16 gets no copies: only auto's choice doubles the half weights.
    plain = worker.Models("cpu", torch.bfloat16)
    worker.generate(plain, request(spec), Sink())
    assert not hasattr(next(iter(plain.held.values()))[0], worker_step.ROW_COPIES)


@pytest.mark.slow
def test_the_worker_compiles_chats_step_after_the_load_and_answers_the_same(
    tiny_run, tiny_model, monkeypatch
):
    """With row copies the worker compiles the one-row step in a background thread once the
    request that loaded the model is answered (tests/conftest.py turns that off for the other
    tests); replies before, during and after are the same, and the later ones go through the
    compiled step."""
    from torch._dynamo.utils import counters

    spec = resolve_target(str(tiny_run)).spec.as_dict()
    size = Shape.read(spec["base"]).params()
    settings = ("cpu", torch.float32, size, torch.bfloat16)
    monkeypatch.setenv(worker.COMPILE_ENV, "0")
    assert not worker.compiles_decode()
    plain = worker.Models(*settings)
    want = worker.generate(plain, request(spec), Sink())
    assert not plain.compiling and plain.status()["compiled_steps"] == 0

    monkeypatch.setenv(worker.COMPILE_ENV, "1")
    if not worker.compiles_decode():
        pytest.skip("no C++ compiler on PATH: the worker keeps the uncompiled step")
    models = worker.Models(*settings)
    loaded = []
    real_compile = models.compile_loaded

    def compile_loaded():  # serve calls it once each request is answered
        loaded.append((models.status()["compiling"], list(models.compiling)))
        real_compile()

    monkeypatch.setattr(models, "compile_loaded", compile_loaded)
    sink = Sink()
    line = json.dumps({**request(spec), "op": "generate"})
    monkeypatch.setattr("sys.stdin", io.StringIO(line + "\n"))
    worker.serve(sink, models)
    done = sink.events[-1]
    assert (done["id"], done["event"], done["texts"]) == (1, "done", want)
    assert loaded == [(1, [])]  # waiting, not started while the request was answered
    [thread] = models.compiling
    assert worker.generate(models, request(spec), Sink()) == want  # during, most likely
    thread.join(timeout=600)
    assert models.status()["compiled_steps"] == 1 and models.status()["compiling"] == 0
    inner = worker_step.base_model(next(iter(models.held.values()))[0])
    compiled = getattr(inner, worker_step.COMPILED_STEP)
    calls = []
    monkeypatch.setattr(
        inner, worker_step.COMPILED_STEP, lambda *a: calls.append(1) or compiled(*a)
    )
    graphs = counters["stats"]["unique_graphs"]
    assert worker.generate(models, request(spec), Sink()) == want
    assert len(calls) == 9  # 10 new tokens: every step after the prompt's
    assert counters["stats"]["unique_graphs"] == graphs  # compiled as the worker decodes


def test_half_precision_merges_the_run_and_holds_its_base_apart(tiny_run, tiny_model):
    """The run's adapter is in its weights (no LoRA layers left); the base is its own entry and
    answers as the model without the run does; float32 keeps the adapter in place."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    spec = resolve_target(str(tiny_run)).spec.as_dict()
    half = worker.Models("cpu", torch.float16)
    tuned = worker.generate(half, request(spec), Sink())
    run_model = next(iter(half.held.values()))[0]
    assert not any(isinstance(m, BaseTunerLayer) for m in run_model.modules())
    assert next(run_model.parameters()).dtype == torch.float16
    base = worker.generate(half, request({**spec, "use_adapter": False}), Sink())
    assert base != tuned and half.loads == 2
    plain = resolve_target(str(tiny_model)).spec.as_dict()
    assert worker.generate(half, request(plain), Sink()) == base
    assert half.loads == 2  # the base entry is the model without the run: already held

    full = worker.Models("cpu", torch.float32)
    assert worker.generate(full, request(spec), Sink()) == tuned  # 19 in 20 agree; this one does
    worker.generate(full, request({**spec, "use_adapter": False}), Sink())
    assert full.loads == 1
    assert any(isinstance(m, BaseTunerLayer) for m in next(iter(full.held.values()))[0].modules())


def test_float32_weights_are_laid_out_for_decoding_and_answer_the_same(
    tiny_run, tiny_model, monkeypatch
):
    """A float32 model's linear weights are stored transposed in the worker (faster products
    on a CPU, worker_decode.lay_out_for_decoding): same shapes and values, same replies with
    the run's adapter on and off."""
    from dragonfarm_core.inference import worker_decode

    spec = resolve_target(str(tiny_run)).spec.as_dict()
    full = worker.Models("cpu", torch.float32)
    replies = [
        worker.generate(full, request(s), Sink()) for s in (spec, {**spec, "use_adapter": False})
    ]
    model = next(iter(full.held.values()))[0]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() for m in linears)
    assert all(m.weight.shape == (m.out_features, m.in_features) for m in linears)

    half = torch.nn.Linear(4, 3).to(torch.bfloat16)
    assert worker_decode.lay_out_for_decoding(half) == 0 and half.weight.is_contiguous()

    monkeypatch.setattr(worker_decode, "lay_out_for_decoding", lambda model: 0)
    as_loaded = worker.Models("cpu", torch.float32)
    assert [worker.generate(as_loaded, request(s), Sink())
            for s in (spec, {**spec, "use_adapter": False})] == replies  # fmt: skip
    model = next(iter(as_loaded.held.values()))[0]
    assert all(m.weight.is_contiguous() for m in model.modules() if isinstance(m, torch.nn.Linear))


@pytest.fixture
def overflowing(tmp_path, tiny_model):
    """The tiny Llama with one MLP scaled so its float16 activations overflow while every
    weight still fits float16 (float32 copes: the norms scale the residual stream back)."""
    from transformers import AutoModelForCausalLM

    folder = shutil.copytree(tiny_model, tmp_path / "overflowing")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(5e5)
        model.model.layers[0].mlp.up_proj.weight.mul_(100.0)
    assert (
        max(float(p.detach().abs().max()) for p in model.parameters()) < 65504
    )  # float16's largest
    model.save_pretrained(folder)
    return folder


def test_decode_refuses_non_finite_float16_logits(overflowing):
    from transformers import AutoModelForCausalLM

    from dragonfarm_core.inference.worker_decode import Decoding

    ids = torch.tensor([[5, 6, 7, 8]])

    def run(dtype):
        model = AutoModelForCausalLM.from_pretrained(overflowing, dtype=dtype).eval()
        return decode(model, ids, torch.ones_like(ids), Decoding(), max_new_tokens=4, stop=[],
                      pad_id=0)  # fmt: skip

    assert run(torch.float32).shape == (1, 4)
    with pytest.raises(NonFiniteLogits, match="float16 values overflowed at new token 1"):
        run(torch.float16)


def test_an_overflowing_model_is_reloaded_in_float32_and_answered(overflowing):
    spec = resolve_target(str(overflowing)).spec.as_dict()
    half, sink = worker.Models("cpu", torch.float16), Sink()
    replies = worker.generate(half, request(spec, stream=True), sink)
    assert replies == worker.generate(worker.Models("cpu", torch.float32), request(spec), Sink())
    assert half.dtype_for(spec) == torch.float32 and half.loads == 2  # float16, then float32
    assert next(next(iter(half.held.values()))[0].parameters()).dtype == torch.float32
    streamed = "".join(e["text"] for e in sink.events if e["event"] == "token")
    assert streamed.strip() == replies[0]  # nothing streamed twice
    assert worker.generate(half, request(spec), Sink()) == replies and half.loads == 2


def test_an_overflow_after_streamed_pieces_fails_the_request_and_the_next_is_float32(
    monkeypatch, tiny_model
):
    """Pieces already shown are not shown again: the request fails saying to send it again,
    and the next request gets the float32 model."""
    from dragonfarm_core.inference import worker_decode

    real = worker_decode.decode

    def overflows_after_streaming(model, *args, streamer=None, **kwargs):
        new = real(model, *args, streamer=streamer, **kwargs)
        if next(model.parameters()).dtype == torch.float16:
            raise NonFiniteLogits("The model's float16 values overflowed at new token 9.")
        return new

    monkeypatch.setattr(worker_decode, "decode", overflows_after_streaming)
    spec = resolve_target(str(tiny_model)).spec.as_dict()
    half, sink = worker.Models("cpu", torch.float16), Sink()
    with pytest.raises(NonFiniteLogits, match="reloaded in float32 for the next request"):
        worker.generate(half, request(spec, stream=True), sink)
    assert any(e["event"] == "token" for e in sink.events)
    assert half.dtype_for(spec) == torch.float32 and not half.held
    assert worker.generate(half, request(spec), Sink()) == worker.generate(
        worker.Models("cpu", torch.float32), request(spec), Sink()
    )


def test_an_overflowing_model_under_auto_loses_its_float16_copies_and_is_answered(overflowing):
    """A float32 model under auto reads float16 copies for one row: when they overflow it is
    reloaded as plain float32 and the request answered."""
    spec = resolve_target(str(overflowing)).spec.as_dict()
    auto = worker.Models("cpu", torch.float32, half_from=Shape.read(spec["base"]).params() + 1)
    assert auto.row_copies_for(spec)
    replies = worker.generate(auto, request(spec), Sink())
    assert replies == worker.generate(worker.Models("cpu", torch.float32), request(spec), Sink())
    assert not auto.row_copies_for(spec) and auto.loads == 2
    model = next(iter(auto.held.values()))[0]
    assert next(model.parameters()).dtype == torch.float32
    assert not hasattr(model, worker_step.ROW_COPIES)
