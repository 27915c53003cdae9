"""The model card a published repo gets: README.md with YAML metadata (base_model, library_name,
license, tags, pipeline_tag), the data, the method and its settings, the held-out metrics and
judge results when there are any, the merge check's verdict, how to load the model with
transformers, peft, llama.cpp and Ollama, and the loss curve as a PNG (`loss_curve`).
The card names no local path (the data file by its name only).
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from dragonfarm_core.export import merge as export
from dragonfarm_core.methods import METHODS
from dragonfarm_core.models import PRESETS, is_bundled
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run

CARD = "README.md"
LOSS_IMAGE = "loss.png"
# Preset licenses as the Hub's license identifiers.
HUB_LICENSES = {"Apache 2.0": "apache-2.0", "MIT": "mit", "Gemma": "gemma", "Llama 3.2": "llama3.2"}


def _base_model(config: dict[str, Any]) -> tuple[str | None, str]:
    """(the base's Hub id, or None when it is a local folder; how the card names it)."""
    model = config.get("model") or {}
    name = str(model.get("name") or model.get("base") or "")
    if is_bundled(name):
        return "dragonfarm/tiny-support", "dragonfarm/tiny-support (bundled with dragonfarm)"
    if "/" in name and not Path(name).expanduser().exists() and not name.startswith((".", "/")):
        return name, name
    return None, f"a local model ({Path(name).name or 'unnamed'})"


def _license(config: dict[str, Any]) -> str:
    """The base model's license as a Hub id: the preset's, else the base folder's model card
    metadata, else "other"."""
    model = config.get("model") or {}
    name = str(model.get("name") or "")
    for preset in PRESETS:
        if preset["id"] == name or (is_bundled(name) and is_bundled(str(preset["id"]))):
            return HUB_LICENSES.get(str(preset["license"]), "other")
    readme = Path(str(model.get("base") or "")) / CARD
    if readme.is_file():
        head = readme.read_text(encoding="utf-8", errors="replace").split("---")
        for line in head[1].splitlines() if len(head) > 2 else []:
            if line.startswith("license:"):
                return line.split(":", 1)[1].strip() or "other"
    return "other"


def _yaml_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON scalars and lists are YAML


def _number(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.4g}"
    return str(value)


def _table(rows: list[tuple[str, Any]]) -> list[str]:
    if not rows:
        return []
    return ["| | |", "|---|---|", *[f"| {k} | {_number(v)} |" for k, v in rows]]


def _settings(config: dict[str, Any]) -> list[str]:
    lora, args = config.get("lora") or {}, config.get("args") or {}
    parts = [f"LoRA r={lora.get('r')}, alpha={lora.get('alpha')}, dropout={lora.get('dropout')}"]
    if lora.get("target_modules") not in (None, "auto"):
        parts[0] += f", target modules {lora['target_modules']}"
    steps = (
        f"{args.get('max_steps')} steps"
        if args.get("max_steps")
        else f"{args.get('epochs')} epochs"
    )
    parts.append(
        f"{steps}, learning rate {args.get('learning_rate')}, batch size {args.get('batch_size')}"
        f" x {args.get('grad_accum')} accumulation, max sequence length {args.get('max_seq_len')}"
    )
    method_args = config.get("method_args") or {}
    simple = {k: v for k, v in method_args.items() if isinstance(v, int | float | str | bool)}
    if simple:
        parts.append(", ".join(f"{k} {v}" for k, v in simple.items()))
    return parts


def _judge_rows(judge: Any) -> list[tuple[str, Any]]:
    """The scalar results of judge.json (whatever its judge wrote), top level and summary."""
    if not isinstance(judge, dict):
        return []
    rows: list[tuple[str, Any]] = []
    for scope in (judge, judge.get("summary") or {}):
        if isinstance(scope, dict):
            rows += [(k, v) for k, v in scope.items()
                     if isinstance(v, int | float | str) and not isinstance(v, bool)
                     and k not in ("rubric", "created_at", "judged_at")]  # fmt: skip
    return rows[:12]


def model_card(run: Run, what: str, repo: str, ggufs: list[str], loss_image: bool) -> str:
    """README.md for the repo: YAML metadata, then training, results and how to use it."""
    config = run.config
    base_id, base_text = _base_model(config)
    method = METHODS.get(run.method)
    method_name = run.method.upper()
    meta = {
        **({"base_model": base_id} if base_id else {}),
        "library_name": "transformers" if what == "merged" else "peft",
        "license": _license(config),
        "tags": ["dragonfarm", run.method, "lora", *(["gguf"] if ggufs else []),
                 *([f"base_model:adapter:{base_id}"] if what == "adapter" and base_id else [])],
        "pipeline_tag": "text-generation",
    }  # fmt: skip
    lines = ["---", *[f"{k}: {_yaml_value(v)}" for k, v in meta.items()], "---", ""]
    kind = "merged model" if what == "merged" else "LoRA adapter"
    lines += [f"# {repo.rpartition('/')[2]}", "",
              f"A {kind} fine-tuned from {base_text} with dragonfarm, "
              f"by {method.label if method else method_name}.", ""]  # fmt: skip
    chain = (config.get("model") or {}).get("adapters") or []
    if chain:
        lines += [f"It continues from {len(chain)} earlier run(s), whose adapters are folded "
                  "in first.", ""]  # fmt: skip
    dataset, data = config.get("dataset") or {}, config.get("data") or {}
    source = Path(str(dataset.get("source") or "")).name or dataset.get("name") or "in-memory data"
    lines += ["## Training", "",
              f"- Data: {source} ({dataset.get('n_rows', '?')} rows): {data.get('n_train', '?')} "
              f"for training, {data.get('n_eval', '?')} held out ({data.get('kind', '?')}).",
              f"- Method: {method_name}; " + "; ".join(_settings(config)) + "."]  # fmt: skip
    status = run.status()
    if status.get("step"):
        lines.append(f"- Trained {status.get('step')} steps.")
    lines.append("")
    lines += _results(run, what, loss_image)
    lines += ["## How to use", "", *_usage(repo, what, base_id, ggufs)]
    return "\n".join(lines).rstrip() + "\n"


def _results(run: Run, what: str, loss_image: bool) -> list[str]:
    """The card's results: held-out metrics, judge results, the loss curve and, for a merged
    model, the merge check's verdict (each only when there is one)."""
    lines: list[str] = []
    results = files.read_eval(run.dir) or {}
    metrics = files.read_record(run.dir / files.METRICS) or {}
    rows = [(k, v) for k, v in {**results, **metrics}.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "step"]  # fmt: skip
    if rows:
        lines += ["## Held-out evaluation", "", *_table(rows), ""]
    judged = _judge_rows(files.read_record(run.dir / files.JUDGE))
    if judged:
        lines += ["## Judge", "", *_table(judged), ""]
    if loss_image:
        lines += ["## Training loss", "", f"![Training loss]({LOSS_IMAGE})", ""]
    if what == "merged":
        merged = export.merged_model(run)
        check = export.merge_check(merged) if merged else None
        if check and check.get("identical"):
            lines += ["## Merge check", "",
                      f"Greedy replies of this merged model equal those of base + adapter on "
                      f"{check.get('prompts')} {check.get('split')} prompts (token ids compared, "
                      f"{check.get('max_new_tokens')} new tokens, {check.get('dtype')}).", ""]  # fmt: skip
    return lines


def _usage(repo: str, what: str, base_id: str | None, ggufs: list[str]) -> list[str]:
    chat = 'messages = [{"role": "user", "content": "My thermostat is offline."}]'
    generate = (
        "ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, "
        'return_tensors="pt")\nprint(tokenizer.decode(model.generate(ids, max_new_tokens=128)[0]'
        "[ids.shape[1]:], skip_special_tokens=True))"
    )
    if what == "merged":
        lines = ["With transformers:", "", "```python",
                 "from transformers import AutoModelForCausalLM, AutoTokenizer",
                 f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
                 f'model = AutoModelForCausalLM.from_pretrained("{repo}")', chat, generate, "```", ""]  # fmt: skip
    else:
        base = base_id or "<the base model>"
        lines = ["With peft (the adapter on its base model):", "", "```python",
                 "from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer",
                 f'model = AutoPeftModelForCausalLM.from_pretrained("{repo}")',
                 f'tokenizer = AutoTokenizer.from_pretrained("{base}")', chat, generate,
                 "model = model.merge_and_unload()  # a plain transformers model", "```", ""]  # fmt: skip
    if ggufs:
        lines += ["With llama.cpp (the GGUF in this repo: " + ", ".join(ggufs) + "):", "",
                  "```sh", f"llama-cli -hf {repo}", "```", "", "With Ollama:", "", "```sh",
                  f"ollama run hf.co/{repo}", "```", ""]  # fmt: skip
    else:
        target = (
            "this repo"
            if what == "merged"
            else "the merged model (`model.merge_and_unload()`, saved)"
        )
        lines += [f"With llama.cpp: convert {target} with llama.cpp's `convert_hf_to_gguf.py`, "
                  "then `llama-cli -m model.gguf`. With Ollama: dragonfarm does both steps and "
                  "registers it, with the chat template checked: `dragon.serve_ollama(run)`.", ""]  # fmt: skip
    return lines


def loss_curve(progress: list[dict[str, Any]], size: tuple[int, int] = (720, 360)) -> bytes | None:
    """The training (and held-out) loss over steps as a PNG, or None without two points."""
    points = [(r["step"], r["loss"]) for r in progress
              if isinstance(r.get("step"), int | float) and isinstance(r.get("loss"), int | float)
              and math.isfinite(r["loss"])]  # fmt: skip
    evals = [(r["step"], r["eval_loss"]) for r in progress
             if isinstance(r.get("step"), int | float) and isinstance(r.get("eval_loss"), int | float)
             and math.isfinite(r["eval_loss"])]  # fmt: skip
    if len(points) < 2:
        return None
    from PIL import Image, ImageDraw, ImageFont

    width, height = size
    left, right, top, bottom = 64, 20, 30, 44
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    xs = [p[0] for p in points + evals]
    ys = [p[1] for p in points + evals]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def at(x: float, y: float) -> tuple[float, float]:
        return (left + (x - x0) / (x1 - x0) * (width - left - right),
                height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom))  # fmt: skip

    draw.rectangle([left, top, width - right, height - bottom], outline="#888888")
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        _, py = at(x0, y)
        draw.line([left - 4, py, left, py], fill="#888888")
        draw.text((4, py - 6), f"{y:.3g}", fill="#333333", font=font)
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        px, _ = at(x, y0)
        draw.text((px - 10, height - bottom + 6), f"{x:.0f}", fill="#333333", font=font)
    draw.text((width // 2 - 12, height - 18), "step", fill="#333333", font=font)
    draw.line([at(x, y) for x, y in points], fill="#10b981", width=2)
    for x, y in evals:
        px, py = at(x, y)
        draw.ellipse([px - 4, py - 4, px + 4, py + 4], fill="#6366f1")
    draw.text((left + 8, 8), "training loss", fill="#10b981", font=font)
    if evals:
        draw.text((left + 120, 8), "held-out loss", fill="#6366f1", font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
