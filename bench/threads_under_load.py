"""Training steps with other processes busy: torch's defaults (a thread per core, spinning
OpenMP waits) against the trainer's policy (dragonfarm_core/trainers/threads.py: the idle
cores, sleeping waits). Each arm is its own process (OpenMP reads its wait policy at start-up)
running LoRA steps on the bundled model (batch 4 x 200 tokens), first with no extra load, then
with `--hogs` busy-looping processes. Last line: key=value, seconds per step over the policy's.

    python bench/threads_under_load.py [--hogs 2] [--steps 8]
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
from dragonfarm_core.trainers import threads
policy = sys.argv[2] == "policy"
if policy:
    threads.before_torch()
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
line = threads.apply() if policy else f"torch threads: {torch.get_num_threads()} (default)"
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


def hog() -> None:
    while True:
        pass


def arm(kind: str, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    out = subprocess.run([sys.executable, "-c", ARM, str(ROOT), kind, str(steps)], env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument("--steps", type=int, default=8)
    opts = parser.parse_args()
    results = {}
    for load in (0, opts.hogs):
        hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(load)]
        for h in hogs:
            h.start()
        try:
            for kind in ("default", "policy"):
                got = arm(kind, opts.steps)
                results[(load, kind)] = got["s_per_step"]
                print(f"{load} busy  {kind:<8} {got['s_per_step']:.3f} s/step  ({got['line']})",
                      flush=True)  # fmt: skip
        finally:
            for h in hogs:
                h.terminate()
    quiet = results[(0, "default")] / results[(0, "policy")]
    loaded = results[(opts.hogs, "default")] / results[(opts.hogs, "policy")]
    print(f"quiet_default_over_policy={quiet:.2f} loaded_default_over_policy={loaded:.2f}")


if __name__ == "__main__":
    main()
