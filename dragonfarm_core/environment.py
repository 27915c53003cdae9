"""`dragon.check()`: what this machine can train on, and why.

Run it first on a new machine. It reports Python and library versions, the device training will
use and the reason (a CPU on a machine with an NVIDIA GPU gets the cause and a one-line fix),
GPU memory, free disk where runs go, whether a Hugging Face token is configured (never its
value), whether the Hub answers, and where llama.cpp is (GGUF export needs it). torch is probed
in a subprocess, so the app stays light.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

from dragonfarm_core.llamacpp import location as llama_cpp

LIBRARIES = (
    "torch",
    "transformers",
    "peft",
    "trl",
    "accelerate",
    "gradio",
    "pandas",
    "tokenizers",
    "huggingface-hub",
)

# Runs in a child interpreter: the only place check() touches torch.
_TORCH_PROBE = r"""
import json, torch
out = {"torch": torch.__version__, "cuda_build": torch.version.cuda,
       "cuda_available": torch.cuda.is_available(), "gpus": []}
if out["cuda_available"]:
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        out["gpus"].append({"name": p.name, "total_gb": round(total / 2**30, 1),
                            "free_gb": round(free / 2**30, 1),
                            "bf16": torch.cuda.is_bf16_supported()})
mps = getattr(torch.backends, "mps", None)
out["mps_available"] = bool(mps and mps.is_available())
print(json.dumps(out))
"""


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _probe_torch(timeout: float = 120) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TORCH_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"importing torch took more than {timeout:.0f} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        return {"error": f"torch could not be imported: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _nvidia_driver() -> str | None:
    """The NVIDIA driver version if nvidia-smi answers, else None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def _device(torch_facts: dict[str, Any], driver: str | None) -> tuple[str, str, str | None]:
    """(device, why, fix) for training."""
    if "error" in torch_facts:
        return "none", torch_facts["error"], "pip install -r requirements.txt"
    if torch_facts.get("cuda_available"):
        names = ", ".join(g["name"] for g in torch_facts["gpus"])
        return "cuda", f"CUDA is available ({names}).", None
    if torch_facts.get("mps_available"):
        return "mps", "Apple Silicon GPU through Metal.", None
    if driver is None:
        return "cpu", "No NVIDIA GPU or driver was found; training runs on the CPU.", None
    if torch_facts.get("cuda_build") is None:
        return (
            "cpu",
            f"An NVIDIA GPU is present (driver {driver}) but this torch is a CPU-only build.",
            "pip install --force-reinstall torch --index-url <the PyTorch CUDA wheel index "
            "matching your driver>",
        )
    return (
        "cpu",
        f"An NVIDIA GPU is present (driver {driver}) but torch cannot use it: the "
        f"driver is probably too old for CUDA {torch_facts['cuda_build']}.",
        "Update the NVIDIA driver (nvidia.com/en-us/drivers), or install a torch build for "
        "an older CUDA.",
    )


def _hub_reachable(timeout: float = 3) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        with urllib.request.urlopen(f"{endpoint}/api/models?limit=1", timeout=timeout):
            return True
    except Exception:
        return False


def _hf_token_configured() -> bool:
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    try:
        from huggingface_hub import get_token

        return get_token() is not None
    except Exception:
        return False


def check(runs_dir: str | os.PathLike[str] | None = None, verbose: bool = True) -> dict[str, Any]:
    """Collect the facts, print a summary when `verbose`, and return them as a dict."""
    from dragonfarm_core.rundir.location import runs_dir as default_runs_dir

    where = Path(runs_dir) if runs_dir is not None else Path(default_runs_dir())
    probe_at = where if where.exists() else next(p for p in [where, *where.parents] if p.exists())
    torch_facts = _probe_torch()
    driver = _nvidia_driver()
    device, why, fix = _device(torch_facts, driver)
    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "libraries": _versions(),
        "device": device,
        "device_reason": why,
        "fix": fix,
        "nvidia_driver": driver,
        "gpus": torch_facts.get("gpus", []),
        "runs_dir": str(where),
        "free_disk_gb": round(shutil.disk_usage(probe_at).free / 2**30, 1),
        "hf_token_configured": _hf_token_configured(),
        "hub_reachable": _hub_reachable(),
        "profile": _profile(),
        "llama_cpp": llama_cpp.describe(),
    }
    if verbose:
        print(format_check(facts))
    return facts


def _profile() -> str:
    """The app's profile as DRAGONFARM_PROFILE selects it, and what it turns off."""
    from dragonfarm_core.auth.profiles import check_line, get_profile

    try:
        return check_line(get_profile())
    except ValueError as e:
        return str(e)


def format_check(facts: dict[str, Any]) -> str:
    """The facts as a few readable lines (the CLI and the app show this)."""
    libs = ", ".join(f"{k} {v or 'missing'}" for k, v in facts["libraries"].items())
    lines = [
        f"Python {facts['python']} ({facts['executable']})",
        f"Libraries: {libs}",
        f"Training device: {facts['device']}. {facts['device_reason']}",
    ]
    if facts.get("fix"):
        lines.append(f"Fix: {facts['fix']}")
    for gpu in facts["gpus"]:
        lines.append(
            f"GPU: {gpu['name']}, {gpu['free_gb']} of {gpu['total_gb']} GB free, "
            f"bf16 {'yes' if gpu['bf16'] else 'no'}"
        )
    lines.append(f"Runs directory: {facts['runs_dir']} ({facts['free_disk_gb']} GB free)")
    if facts.get("profile"):
        lines.append(f"App: {facts['profile']}")
    lines.append(
        "Hugging Face token: "
        + (
            "configured"
            if facts["hf_token_configured"]
            else "not set (needed only for gated models)"
        )
    )
    lines.append(
        "Hugging Face Hub: "
        + (
            "reachable"
            if facts["hub_reachable"]
            else "not reachable (the bundled model and local folders still work)"
        )
    )
    if facts.get("llama_cpp"):
        lines.append(_llama_cpp_line(facts["llama_cpp"]))
    return "\n".join(lines)


def _llama_cpp_line(found: dict[str, Any]) -> str:
    """Where llama.cpp (GGUF export and its check) is, or why there is none and how to get it."""
    if found.get("available"):
        version = f" (llama-cpp-python {found['version']} sources)" if found.get("version") else ""
        return f"llama.cpp: {found['root']}{version}, found by {found['found_by']}"
    return f"llama.cpp: not available, so no GGUF export. {found.get('problem')}"
