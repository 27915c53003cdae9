"""python bench/decode.py [--max-new-tokens 128] [--batch 8] [--prompts 2] [--repeats 3]
                         [--models bundled,smol]

Decode speed of every generation path on the same model, prompts and GGUF, all in one run:

- plain: transformers' `model.generate` in this process, torch's default threads (what the
  worker and the trainers' samples did before `worker_decode`);
- ours: `worker_decode.decode`, the shared loop the worker and the trainers use (its trimmed
  step, worker_step, after the prompt), with its thread rule (`cpu_threads`), in float32 with
  the weights laid out as the worker lays out a float32 model (`lay_out_for_decoding`): the
  worker's `--dtype float32`; ours_unlaid: the same as loaded (the trainers' samples and
  rollouts);
- ours_auto: the same loop on the model as the worker's "auto" loads it on this CPU
  (`worker.Models.load`): below 50M parameters float32, from there bfloat16 on a CPU with bf16
  instructions (float16 on other AVX CPUs), each with float16 copies of its matrices for
  one-row steps (`add_row_copies`), the one-row step compiled (`warm_compiled`, as the worker
  compiles it after a load; its time is `*_auto_compile_s`, not counted in the speeds);
  ours_auto_eager: the same without the compiled step;
- llama.cpp: llama-server on the same weights as an f16 GGUF, 2 threads; batch 8 is 8
  requests at once on 8 slots.

Greedy, `--max-new-tokens` new tokens with end-of-sequence ignored, at batch 1 and `--batch`,
on the bundled model and on a SmolLM2-135M-shaped model (its real config, random weights, the
bundled tokenizer; built here in bench/out/, never downloaded; its GGUF is converted without
the template check, whose greedy comparison means nothing on random weights). Tokens/s are new
tokens over wall time, prompt included (the prompts are a few dozen tokens). Then, on the
bundled model, the backends as chat uses them: the warm worker (`backend_local`), once it has
compiled chat's step, and `backend_llamacpp` on the same GGUF, streamed, stopping at the end of
the reply: first token and decode tokens/s, and the llama.cpp backend's speed over
llama-server's own on those replies (its overhead). On the 135M shape, the warm worker's first
token: a chat call for one new token, prompt and template included
(`smol_worker_first_token_s`). The torch arms and llama-server take turns `--repeats` times
and each speed is the median of its turns (on a shared VM llama.cpp's own speed varied by a
third between runs).
Results go to bench/out/decode.json; the last line holds the ratios of those medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "bench")]
THREADS = 2

from chat_latency import prompts, summary, timed_chat, token_counter  # noqa: E402

from dragonfarm_core.export import gguf  # noqa: E402
from dragonfarm_core.inference import (  # noqa: E402
    Sampling,
    backend_llamacpp,
    backend_local,
    worker_stop,  # noqa: E402
)
from dragonfarm_core.inference.target import resolve_target  # noqa: E402
from dragonfarm_core.llamacpp.server import LlamaServer  # noqa: E402
from dragonfarm_core.models import bundled_model_path  # noqa: E402

OUT = ROOT / "bench" / "out"
# SmolLM2-135M's config.json (the shape: widths, depth, heads, vocabulary), weights random.
SMOL_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
             "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
             "vocab_size": 49152, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
             "rope_theta": 100000.0, "tie_word_embeddings": True,
             "initializer_range": 0.041666666666666664}  # fmt: skip


def smol_model() -> Path:
    """The SmolLM2-135M shape with random weights and the bundled tokenizer, made once, stored
    in bfloat16 as SmolLM2-135M's weights are (a float32 file read into bfloat16 weights
    peaked at 1,259 MiB here, the file's pages and the weights at once: more than training)."""
    return shaped_model("smollm2-135m", "llama", SMOL_135M)


def shaped_model(name: str, model_type: str, shape: dict) -> Path:
    """A model of `model_type` with the configuration `shape`, random weights (seed 0) and the
    bundled tokenizer, made once in bench/out/<name>-shape, stored in bfloat16."""
    folder = OUT / f"{name}-shape"
    weights, config = folder / "model.safetensors", folder / "config.json"
    if weights.is_file():
        stored = json.loads(config.read_text())
        sizes = ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")
        if stored.get("dtype") == "bfloat16" and all(stored[k] == shape[k] for k in sizes):
            return folder
    (OUT / f"{folder.name}-f16.gguf").unlink(missing_ok=True)  # made from the old weights
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    bundled = bundled_model_path()
    base = json.loads((bundled / "config.json").read_text())
    ids = {k: base[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **shape, **ids))
    model.to(torch.bfloat16).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                 "chat_template.jinja", "generation_config.json"):  # fmt: skip
        shutil.copy(bundled / name, folder / name)
    return folder


def f16_gguf(folder: Path, checked: bool) -> Path:
    """The model as an f16 GGUF in bench/out/ (made once): through export_gguf with its check
    for the bundled model, straight through llama.cpp's converter for random weights."""
    path = OUT / f"{folder.name}-f16.gguf"
    if checked:
        record = gguf.read_check(path)
        if record is None or not record["passed"]:
            gguf.export_gguf(folder, out_file=path, quant="f16")
    elif not path.is_file():
        from dragonfarm_core.trainers.gguf_convert import convert

        convert(gguf.find_llama_cpp(), folder, path, "f16")
    return path


def prompt_ids(folder: Path, texts: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}],
                                          add_generation_prompt=True, tokenize=True,
                                          return_dict=False) for t in texts]  # fmt: skip


def torch_speeds(folder: Path, rows: list[list[int]], batch: int, new: int) -> dict[str, float]:
    """plain generate(), our decode loop in float32 and on the model as the worker's "auto"
    loads it, batch 1 (each prompt) and `batch` (one batch)."""
    import torch
    from transformers import AutoModelForCausalLM

    from dragonfarm_core.inference import worker
    from dragonfarm_core.inference.worker_decode import (
        Decoding,
        cpu_threads,
        decode,
        lay_out_for_decoding,
    )
    from dragonfarm_core.inference.worker_step import warm_compiled

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    spec = resolve_target(str(folder)).spec.as_dict()
    auto = worker.Models("cpu", torch.float32, worker.cpu_half_from("cpu", "auto"),
                         worker.cpu_half_dtype())  # fmt: skip
    auto_eager, _ = auto.load(spec)
    auto_model, _ = auto.load(spec)
    start = time.perf_counter()
    warm_compiled(auto_model)  # False without copies (a CPU without AVX): then as eager
    compile_s = time.perf_counter() - start
    laid_out = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    lay_out_for_decoding(laid_out)  # what the worker does to a float32 model
    pad = model.config.pad_token_id

    def plain(ids, mask):
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=pad)  # fmt: skip

    def loop(m):
        def run(ids, mask):
            with torch.inference_mode(), cpu_threads(m, len(ids)):
                decode(m, ids, mask, Decoding(), max_new_tokens=new, stop=[], pad_id=pad)

        return run

    arms = {"plain": plain, "ours_unlaid": loop(model), "ours": loop(laid_out),
            "ours_auto_eager": loop(auto_eager), "ours_auto": loop(auto_model)}  # fmt: skip
    return {"auto_compile_s": compile_s} | timed_arms(arms, rows, batch, new, pad)


def timed_arms(arms: dict, rows: list[list[int]], batch: int, new: int, pad: int,
               device: str = "cpu") -> dict[str, float]:  # fmt: skip
    """New tokens/s of each arm (a call on left-padded ids and mask that decodes `new` tokens
    a row), after one warm call: at batch 1 (each prompt alone) as `<arm>_b1`, and `batch`
    rows at once as `<arm>_b<batch>`. The tensors go to `device` (on a GPU the clock is read
    after the device has finished)."""
    import torch

    from dragonfarm_core.trainers.grpo_rollout import left_pad

    def call(run, group: list[list[int]]) -> None:
        run(*(t.to(device) for t in left_pad(group, pad)))
        if device != "cpu":
            torch.cuda.synchronize()

    results = {}
    for name, run in arms.items():
        call(run, rows[:1])  # warm
        for size in (1, batch):
            groups = [rows[i : i + 1] for i in range(len(rows))] if size == 1 else [
                (rows * batch)[:batch]]  # fmt: skip
            start = time.perf_counter()
            for group in groups:
                call(run, group)
            results[f"{name}_b{size}"] = sum(map(len, groups)) * new / (
                time.perf_counter() - start)  # fmt: skip
    return results


def llama_speeds(path: Path, rows: list[list[int]], batch: int, new: int) -> dict[str, float]:
    """llama-server on the GGUF: each prompt alone, then `batch` at once on as many slots."""
    results = {}
    with LlamaServer.start(gguf.find_llama_cpp(), path, threads=THREADS, ctx=512 * batch,
                           slots=batch, log=OUT / "llama-server.log") as server:  # fmt: skip
        server.complete(rows[0], 8, ignore_eos=True)  # warm
        for size in (1, batch):
            groups = [rows[i : i + 1] for i in range(len(rows))] if size == 1 else [
                (rows * batch)[:batch]]  # fmt: skip
            start = time.perf_counter()
            with ThreadPoolExecutor(size) as pool:
                for group in groups:
                    list(pool.map(lambda r: server.complete(r, new, ignore_eos=True), group))
            results[f"llama_b{size}"] = sum(map(len, groups)) * new / (
                time.perf_counter() - start)  # fmt: skip
    return results


def raw_chat(server: LlamaServer, text: str, new: int, count) -> dict[str, float]:
    """One greedy reply from llama-server itself (its template, no backend): tokens/s."""
    ids = [
        i for i, _ in server.tokenize(server.apply_template([{"role": "user", "content": text}]))
    ]
    start = time.perf_counter()
    answer = server.complete(ids, new)
    return {"tokens": len(answer["tokens"]), "tokens_per_s": len(answer["tokens"]) / (
        time.perf_counter() - start)}  # fmt: skip


def backend_speeds(folder: Path, path: Path, texts: list[str], new: int) -> dict[str, dict]:
    """The warm worker and backend_llamacpp as chat uses them (streamed, stopping at the end of
    the reply), and llama-server's own speed on the same prompts."""
    count = token_counter(folder)
    greedy = Sampling(new, 0.0)
    spec = resolve_target(str(folder)).spec
    found = {}
    for name, b in (("worker", backend_local()), ("llamacpp", backend_llamacpp(
            path, threads=THREADS, slots=1))):  # fmt: skip
        b.chat(spec, [{"role": "user", "content": texts[0]}], greedy, lambda _: None)  # warm
        if name == "worker":
            wait_compiled(b)
        found[name] = summary([timed_chat(b, spec, t, greedy, count) for t in texts * 2])
        getattr(b, "stop", worker_stop)()
    with LlamaServer.start(gguf.find_llama_cpp(), path, threads=THREADS,
                           log=OUT / "llama-server.log") as server:  # fmt: skip
        raw_chat(server, texts[0], new, count)  # warm
        found["llama_server"] = summary([raw_chat(server, t, new, count) for t in texts * 2])
    return found


def wait_compiled(worker) -> None:
    """Until the worker has compiled chat's step (in the background after a load)."""
    while worker.status()["compiling"]:
        time.sleep(1)


def worker_first_token(folder: Path, texts: list[str]) -> float:
    """The warm worker's first token (dtype auto): a whole chat call that asks for one new
    token, median of the prompts twice, once the worker has compiled chat's step. The first
    *visible* piece is not timed here: random weights often start with tokens that print
    nothing, so it would time their luck."""
    one, spec = Sampling(1, 0.0), resolve_target(str(folder)).spec
    b = backend_local()
    b.chat(spec, [{"role": "user", "content": texts[0]}], one, lambda _: None)  # warm
    wait_compiled(b)
    times = []
    for text in texts * 2:
        start = time.perf_counter()
        b.chat(spec, [{"role": "user", "content": text}], one, lambda _: None)
        times.append(time.perf_counter() - start)
    worker_stop()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2, help="batch-1 prompts per path")
    parser.add_argument("--repeats", type=int, default=3, help="turns of every arm (median)")
    parser.add_argument("--models", default="bundled,smol")
    args = parser.parse_args()
    try:
        gguf.find_llama_cpp()
    except gguf.LlamaCppMissing as e:
        sys.exit(str(e))
    OUT.mkdir(parents=True, exist_ok=True)
    texts = prompts(args.prompts)
    results: dict[str, dict] = {}
    for key in args.models.split(","):
        folder = bundled_model_path() if key == "bundled" else smol_model()
        path = f16_gguf(folder, checked=key == "bundled")
        rows = prompt_ids(folder, texts)
        turns = [
            torch_speeds(folder, rows, args.batch, args.max_new_tokens)
            | llama_speeds(path, rows, args.batch, args.max_new_tokens)
            for _ in range(args.repeats)
        ]
        speeds = {k: statistics.median(turn[k] for turn in turns) for k in turns[0]}
        results[key] = speeds | {"turns": turns}
        print(key, {k: round(v, 1) for k, v in speeds.items()}, file=sys.stderr, flush=True)
        if key == "smol":
            results["smol_worker_first_token_s"] = worker_first_token(folder, texts)
        if key == "bundled":
            results["backends"] = backend_speeds(folder, path, texts, args.max_new_tokens)
            print(results["backends"], file=sys.stderr, flush=True)
    (OUT / "decode.json").write_text(json.dumps(results, indent=2))
    line = {}
    for key in args.models.split(","):
        r = results[key]
        for size in (1, args.batch):
            line[f"{key}_b{size}_ours_over_llama"] = r[f"ours_b{size}"] / r[f"llama_b{size}"]
            line[f"{key}_b{size}_plain_over_llama"] = r[f"plain_b{size}"] / r[f"llama_b{size}"]
            line[f"{key}_b{size}_auto_over_llama"] = r[f"ours_auto_b{size}"] / r[f"llama_b{size}"]
        line[f"{key}_b1_compiled_over_eager"] = r["ours_auto_b1"] / r["ours_auto_eager_b1"]
        line[f"{key}_auto_compile_s"] = r["turns"][0]["auto_compile_s"]
    if "backends" in results:
        b = results["backends"]
        line["llamacpp_backend_over_server"] = (
            b["llamacpp"]["tokens_per_s"] / b["llama_server"]["tokens_per_s"]
        )
        line["worker_first_token_s"] = b["worker"]["ttft_s"]
        line["llamacpp_first_token_s"] = b["llamacpp"]["ttft_s"]
    if "smol_worker_first_token_s" in results:
        line["smol_worker_first_token_s"] = results["smol_worker_first_token_s"]
    print(" ".join(f"{k}={v:.3g}" for k, v in line.items()))


if __name__ == "__main__":
    main()
