"""python bench/decode.py [--model PATH] [--quant f16] [--max-new-tokens 128] [--prompts 8]

Decode speed of our local inference worker against llama.cpp, on the same model and prompts:
the bundled model (or --model) as it is, through the warm worker (`backend_local`, as
dragon.generate and the chat use it), and the same model exported with `dragon.export_gguf`
(llama.cpp's converter, the template round-trip check included) served by llama.cpp's own
llama-server. Both decode greedily, 128 new tokens at most, with 2 threads (OMP_NUM_THREADS
for the worker, -t 2 for llama-server), one prompt at a time, after a warm-up call.

Decode tokens/s leaves out the prompt: for the worker (tokens - 1) / (total - time to the first
streamed piece), tokens counted with the model's tokenizer on the reply; for llama.cpp its own
timings (predicted_per_second). llama.cpp needs scripts/build_llama_cpp.py (or LLAMA_CPP_DIR).
The GGUF is kept in bench/out/ and reused while its check record matches it. Results also go to
bench/out/decode.json. The last line holds the ratio: ours_over_llama_cpp (decode tokens/s of
the worker / llama.cpp's; the aim in PERFORMANCE.md is >= 1), with both speeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "bench")]
THREADS = "2"
os.environ.setdefault("OMP_NUM_THREADS", THREADS)  # the worker inherits it (childenv: OMP_*)
os.environ.setdefault("MKL_NUM_THREADS", THREADS)

from chat_latency import (  # noqa: E402  (the same model, prompts and timing)
    model_or_exit,
    prompts,
    timed_chat,
    token_counter,
)

import dragonfarm_core as dragon  # noqa: E402
from dragonfarm_core import gguf  # noqa: E402
from dragonfarm_core.inference import Sampling, backend_local, worker_stop  # noqa: E402
from dragonfarm_core.inference.target import resolve_target  # noqa: E402
from dragonfarm_core.llama_server import LlamaServer  # noqa: E402
from dragonfarm_core.models import bundled_model_path  # noqa: E402

OUT = ROOT / "bench" / "out"


def exported(model_dir: Path, quant: str) -> Path:
    """The model as a checked GGUF in bench/out/ (made once, reused while its check holds)."""
    path = OUT / f"{model_dir.name}-{quant}.gguf"
    record = gguf.read_check(path)
    if record is None or not record["passed"]:
        path = dragon.export_gguf(model_dir, out_file=path, quant=quant)
        record = gguf.read_check(path)
    print(f"{path.name}: {gguf.describe_check(record)}", file=sys.stderr, flush=True)
    return path


def ours(model_dir: Path, texts: list[str], max_new_tokens: int, count) -> list[dict]:
    """Each prompt through the warm worker, streamed (chat_latency's timing): decode tokens/s
    without the prompt."""
    backend = backend_local()
    spec = resolve_target(str(model_dir)).spec
    greedy = Sampling(max_new_tokens, 0.0)
    backend.chat(spec, [{"role": "user", "content": texts[0]}], greedy, lambda _: None)  # warm
    calls = [timed_chat(backend, spec, text, greedy, count) for text in texts]
    worker_stop()
    return calls


def llama(path: Path, texts: list[str], max_new_tokens: int) -> list[dict]:
    """Each prompt through llama-server, rendered by the GGUF's own template: its timings."""
    tools = gguf.find_llama_cpp()
    calls = []
    with LlamaServer.start(tools, path, threads=int(THREADS), log=OUT / "llama-server.log") as s:
        ids = lambda text: [  # noqa: E731
            i for i, _ in s.tokenize(s.apply_template([{"role": "user", "content": text}]))
        ]
        s.complete(ids(texts[0]), max_new_tokens)  # warm
        for text in texts:
            answer = s.complete(ids(text), max_new_tokens)
            timings = answer.get("timings") or {}
            calls.append({"tokens": len(answer["tokens"]),
                          "ttft_s": timings.get("prompt_ms", 0.0) / 1000,
                          "total_s": (timings.get("prompt_ms", 0.0)
                                      + timings.get("predicted_ms", 0.0)) / 1000,
                          "tokens_per_s": timings.get("predicted_per_second", 0.0)})  # fmt: skip
    return calls


def summary(calls: list[dict]) -> dict:
    return {k: statistics.median(c[k] for c in calls) for k in calls[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(bundled_model_path()))
    parser.add_argument("--quant", default="f16", help="the GGUF's type (default f16)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=8)
    args = parser.parse_args()
    model_dir = model_or_exit(args.model)
    try:
        gguf.find_llama_cpp()
    except gguf.LlamaCppMissing as e:
        sys.exit(str(e))
    OUT.mkdir(parents=True, exist_ok=True)
    count = token_counter(model_dir)
    texts = prompts(args.prompts)
    path = exported(model_dir, args.quant)
    mine = summary(ours(model_dir, texts, args.max_new_tokens, count))
    theirs = summary(llama(path, texts, args.max_new_tokens))
    results = {
        "model": str(model_dir),
        "gguf": str(path),
        "quant": args.quant,
        "prompts": len(texts),
        "max_new_tokens": args.max_new_tokens,
        "threads": int(THREADS),
        "ours": mine,
        "llama_cpp": theirs,
        "ours_over_llama_cpp": mine["tokens_per_s"] / theirs["tokens_per_s"],
    }
    (OUT / "decode.json").write_text(json.dumps(results, indent=2))
    for name, r in (("ours (worker)", mine), (f"llama.cpp {args.quant}", theirs)):
        print(
            f"{name:18} first token {r['ttft_s'] * 1000:8.1f} ms   total {r['total_s']:6.2f} s"
            f"   {r['tokens']:5.0f} tokens   decode {r['tokens_per_s']:7.1f} tokens/s"
        )
    print(
        f"ours_over_llama_cpp={results['ours_over_llama_cpp']:.3g} "
        f"ours_tokens_per_s={mine['tokens_per_s']:.3g} "
        f"llama_cpp_tokens_per_s={theirs['tokens_per_s']:.3g}"
    )


if __name__ == "__main__":
    main()
