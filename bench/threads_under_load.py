"""Training steps with other processes busy: torch's defaults (a thread per core, spinning
OpenMP waits) against the trainer's policy (dragonfarm_core/rundir/threads.py: the idle
cores, sleeping waits). Each arm is its own process (OpenMP reads its wait policy at start-up)
running LoRA steps on the bundled model (batch 4 x 200 tokens), first with no extra load, then
with `--hogs` busy-looping processes. Then chat's decode the same way, with no load and beside
`--decode-hogs` busy processes: one row on the bundled model as the worker's "auto" loads it
(float16 row copies, the step compiled) on all threads (default) against the worker's policy
(worker_decode.watch_other_load: the cores other processes leave idle), greedy, 128 tokens.
Last line: key=value, seconds per step over the policy's; decode tokens/s, policy over default.

    python bench/threads_under_load.py [--hogs 2] [--steps 8] [--decode-hogs 1] [--replies 5]
                                       [--parts train,decode]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ARM = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from dragonfarm_core.rundir import threads
from dragonfarm_core.trainers import torch_threads
policy = sys.argv[2] == "policy"
if policy:
    threads.before_torch()
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
line = torch_threads.apply() if policy else f"torch threads: {torch.get_num_threads()} (default)"
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1] + "/assets/models/tiny-support")
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                         task_type="CAUSAL_LM"))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
x = torch.randint(0, 4096, (4, 200))
def step():
    model(input_ids=x, labels=x).loss.backward(); opt.step(); opt.zero_grad()
step(); step()
began = time.perf_counter()
for _ in range(int(sys.argv[3])):
    step()
print(json.dumps({"s_per_step": (time.perf_counter() - began) / int(sys.argv[3]), "line": line}))
"""

DECODE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from dragonfarm_core.inference import worker, worker_decode
from dragonfarm_core.inference.target import resolve_target
from dragonfarm_core.inference.worker_step import warm_compiled
from dragonfarm_core.models import bundled_model_path
spec = resolve_target(str(bundled_model_path())).spec.as_dict()
models = worker.Models("cpu", torch.float32, worker.cpu_half_from("cpu", "auto"),
                       worker.cpu_half_dtype())
model, tokenizer = models.load(spec)
compiled = warm_compiled(model)
if sys.argv[2] == "policy":
    load = worker_decode.watch_other_load()
    while load.samples < 2:
        time.sleep(0.1)
ids = tokenizer.apply_chat_template(
    [{"role": "user", "content": "My router drops off Wi-Fi every evening. What should I try?"}],
    add_generation_prompt=True, return_tensors="pt", return_dict=True)
def reply():
    with torch.inference_mode(), worker_decode.cpu_threads(model, 1):
        worker_decode.decode(model, ids["input_ids"], ids["attention_mask"],
                             worker_decode.Decoding(), max_new_tokens=128, stop=[],
                             pad_id=tokenizer.pad_token_id)
reply()
began = time.perf_counter()
for _ in range(int(sys.argv[3])):
    reply()
print(json.dumps({"tokens_per_s": 128 * int(sys.argv[3]) / (time.perf_counter() - began),
                  "line": f"{worker_decode.decode_threads(model, 1)} threads, compiled {compiled}"}))
"""


def hog() -> None:
    while True:
        pass


def arm(kind: str, steps: int, code: str = ARM) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), kind, str(steps)], env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def both_arms(hogs: int, count: int, code: str, key: str, label: str) -> dict[str, float]:
    """Each arm's `key` figure, "default" then "policy", with `hogs` busy-looping processes
    beside them."""
    busy = [multiprocessing.Process(target=hog, daemon=True) for _ in range(hogs)]
    for h in busy:
        h.start()
    found = {}
    try:
        for kind in ("default", "policy"):
            got = arm(kind, count, code)
            found[kind] = got[key]
            print(f"{hogs} busy  {label} {kind:<8} {got[key]:.4g} ({got['line']})", flush=True)
    finally:
        for h in busy:
            h.terminate()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--decode-hogs", type=int, default=1, help="busy processes (default 1)")
    parser.add_argument("--replies", type=int, default=5)
    parser.add_argument("--parts", default="train,decode")
    opts = parser.parse_args()
    parts, line = opts.parts.split(","), []
    if "train" in parts:
        quiet, loaded = (both_arms(hogs, opts.steps, ARM, "s_per_step", "s/step")
                         for hogs in (0, opts.hogs))  # fmt: skip
        line += [f"quiet_default_over_policy={quiet['default'] / quiet['policy']:.2f}",
                 f"loaded_default_over_policy={loaded['default'] / loaded['policy']:.2f}"]  # fmt: skip
    if "decode" in parts:
        quiet, loaded = (both_arms(hogs, opts.replies, DECODE, "tokens_per_s", "decode tokens/s")
                         for hogs in (0, opts.decode_hogs))  # fmt: skip
        line += [f"quiet_decode_policy_over_default={quiet['policy'] / quiet['default']:.2f}",
                 f"loaded_decode_policy_over_default={loaded['policy'] / loaded['default']:.2f}"]  # fmt: skip
    print(" ".join(line))


if __name__ == "__main__":
    main()
