"""`publish(run, repo)`: a run's model as a repo on the Hugging Face Hub, with a model card (the
module is `publishing`, so that `dragonfarm_core.publish` stays the function).

    url = dragon.publish(run, "yourname/support-agent")                   # the merged model
    url = dragon.publish(run, "yourname/support-agent-lora", what="adapter")

The repo is created when it does not exist (private=True for a private one), then one commit
uploads the files through `huggingface_hub`: for "merged" the merged folder (the run is merged
first when it has not been) and the GGUF files exported from it, for "adapter" the LoRA
adapter; and in both a generated README.md (YAML metadata: base_model, library_name, license,
tags, pipeline_tag; the data, the method and its settings, the held-out metrics and judge
results when there are any, the loss curve as loss.png, and how to load the model with
transformers, peft, llama.cpp and Ollama). What is dragonfarm's own bookkeeping stays home:
the merge's COMPLETE marker and merge_check.json (it quotes held-out prompts; the card gives
its verdict). The card names no local path (the data file by its name only).

The token: `token=`, else HF_TOKEN, else the login cache (`hf auth login`), as
huggingface_hub finds them. It is sent to the Hub and written nowhere: not into the run, the
repo, a log or a job's command line or environment. The app publishes through a job
(`start_publish`, the token on the job's standard input); the Python call runs here, where the
token already is. Before anything is written the token is checked (`whoami`): an invalid one,
a read-only one, or a repo under a namespace that is neither the token's user nor one of its
organisations is refused with what to do, and so is a 401 or 403 from any later call.

Uploads use Xet (hf_xet) against the Hub itself and plain Git LFS against any other endpoint
(`endpoint=` or HF_ENDPOINT: a mirror, an on-premise hub, the tests' local server), which need
not offer Xet. No torch: the app and the job (`python -m dragonfarm_core.publishing`) run this.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dragonfarm_core import export, export_jobs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.models import PRESETS, is_bundled
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run, open_run

JOB_KIND = "publish"
WHATS = ("merged", "adapter")
CARD = "README.md"
LOSS_IMAGE = "loss.png"
# Never uploaded from the merged folder: dragonfarm's bookkeeping (the card replaces README.md).
LEFT_HOME = frozenset({export.COMPLETE, export.CHECK_FILE, CARD})
# Preset licenses as the Hub's license identifiers.
HUB_LICENSES = {"Apache 2.0": "apache-2.0", "MIT": "mit", "Gemma": "gemma", "Llama 3.2": "llama3.2"}
TOKEN_HELP = (
    "set HF_TOKEN, run `hf auth login`, or pass token=; create a token with write access at "
    "{endpoint}/settings/tokens"
)


class PublishError(RuntimeError):
    """Publishing was refused or failed; the message says why and what to do."""


# --- the token and the endpoint -----------------------------------------------------------------


def hub_token(token: str | None = None) -> str:
    """The token to publish with: `token`, else HF_TOKEN, else the login cache."""
    from huggingface_hub import constants, get_token

    found = (token or "").strip() or get_token()
    if not found:
        raise PublishError(
            "No Hugging Face token: " + TOKEN_HELP.format(endpoint=constants.ENDPOINT) + "."
        )
    return found


def hub_endpoint(endpoint: str | None = None) -> str:
    from huggingface_hub import constants

    return (endpoint or constants.ENDPOINT).rstrip("/")


@contextlib.contextmanager
def _transfer_for(endpoint: str) -> Iterator[None]:
    """Xet for the Hub itself; plain LFS for another endpoint, which may not offer Xet
    (huggingface_hub tries Xet whenever hf_xet is installed, and reads this switch per call)."""
    from huggingface_hub import constants

    own = endpoint == constants._HF_DEFAULT_ENDPOINT
    before = constants.HF_HUB_DISABLE_XET
    constants.HF_HUB_DISABLE_XET = before or not own
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = before


def _http_error(e: Exception, repo: str, endpoint: str, user: str | None) -> PublishError:
    """A Hub refusal as a PublishError saying what to do."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    said = (getattr(e, "server_message", None) or str(e)).strip().splitlines()[0]
    who = f" (the token is {user}'s)" if user else ""
    if status == 401:
        return PublishError(
            f"The Hub at {endpoint} refused the token (401 Unauthorized: {said}): it is invalid "
            f"or expired. To use another, {TOKEN_HELP.format(endpoint=endpoint)}."
        )
    if status == 403:
        return PublishError(
            f"The Hub at {endpoint} does not let this token write to {repo}{who} (403 Forbidden: "
            f"{said}). Use a token with write access to that namespace, or publish under your "
            "own name."
        )
    if status == 404:
        return PublishError(f"The Hub at {endpoint} has no repo {repo} (404: {said}).")
    return PublishError(f"Publishing to {repo} at {endpoint} failed: {type(e).__name__}: {said}")


def check_access(api: Any, repo: str, endpoint: str) -> tuple[str, str]:
    """Who the token is, and the full repo id; refuses an invalid or read-only token and a
    namespace that is neither the user's nor one of their organisations'."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        me = api.whoami()
    except HfHubHTTPError as e:
        raise _http_error(e, repo, endpoint, None) from None
    user = str(me.get("name") or "")
    orgs = [str(o.get("name")) for o in me.get("orgs") or [] if isinstance(o, dict)]
    namespace, _, name = repo.rpartition("/")
    namespace = namespace or user
    if namespace not in (user, *orgs):
        mine = ", ".join([user, *orgs])
        raise PublishError(
            f"{repo} belongs to {namespace}, which is not this token's user or one of its "
            f"organisations ({mine}). Publish under your own name, e.g. {user}/{name}."
        )
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise PublishError(
            f"The token is read-only (it is {user}'s); publishing needs one with write access: "
            f"create one at {endpoint}/settings/tokens."
        )
    return user, f"{namespace}/{name}"


# --- what is uploaded ---------------------------------------------------------------------------


def run_ggufs(run: Run) -> list[Path]:
    """GGUF files exported from the run's merged model (llama.cpp), newest last."""
    found = [
        p for p in run.dir.rglob("*.gguf") if files.JOBS_DIR not in p.relative_to(run.dir).parts
    ]
    return sorted(p for p in found if p.is_file() and not p.name.startswith("."))


def folder_files(folder: Path, leave: frozenset[str] = LEFT_HOME) -> list[tuple[str, Path]]:
    """(path in the repo, file) for every file under `folder`, but the ones left home."""
    picked = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and rel.parts[0] not in leave and not rel.name.startswith("."):
            picked.append((rel.as_posix(), path))
    return picked


# --- the model card -----------------------------------------------------------------------------


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
    import json

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
    results = files.read_eval(run.dir) or {}
    metrics = files.read_json(run.dir / files.METRICS) or {}
    rows = [(k, v) for k, v in {**results, **metrics}.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "step"]  # fmt: skip
    if rows:
        lines += ["## Held-out evaluation", "", *_table(rows), ""]
    judged = _judge_rows(files.read_json(run.dir / files.JUDGE))
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
    lines += ["## How to use", "", *_usage(repo, what, base_id, ggufs)]
    return "\n".join(lines).rstrip() + "\n"


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


def prepare(run: Run, what: str, repo: str, gguf: bool = True) -> list[tuple[str, Path | bytes]]:
    """Everything the commit uploads: (path in the repo, file or bytes), the card last."""
    if what == "merged":
        folder = export.merged_model(run)
        if folder is None:
            raise PublishError(f"Run {run.id} has no merged model; merge it first.")
        uploads: list[tuple[str, Path | bytes]] = list(folder_files(folder))
        ggufs = run_ggufs(run) if gguf else []
        uploads += [(p.name, p) for p in ggufs]
    else:
        adapter = files.adapter_dir(run.dir)
        if not (adapter / "adapter_config.json").is_file():
            raise PublishError(f"Run {run.id} has no saved adapter in {adapter}; train it first.")
        uploads = list(folder_files(adapter, frozenset({CARD})))
        ggufs = []
    image = loss_curve(files.read_progress(run.dir))
    if image is not None:
        uploads.append((LOSS_IMAGE, image))
    card = model_card(run, what, repo, [p.name for p in ggufs], image is not None)
    uploads.append((CARD, card.encode("utf-8")))
    return uploads


# --- publishing ---------------------------------------------------------------------------------


def publish(
    run: Run | str | os.PathLike[str],
    repo: str,
    what: str = "merged",
    private: bool = False,
    commit_message: str | None = None,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    gguf: bool = True,
    log: Callable[[str], None] = print,
) -> str:
    """Upload a run's model to the Hub as `repo` ("name" or "namespace/name"); its URL.

    what: "merged" (the standalone model; the run is merged first when needed, and GGUF files
    exported from it go too unless gguf=False) or "adapter" (the LoRA adapter alone). private:
    create the repo private (an existing repo keeps its visibility). commit_message: default
    "dragonfarm: <what> model of run <id>". token: default HF_TOKEN, else the login cache.
    endpoint: another Hub (default HF_ENDPOINT, else the Hub). Raises PublishError.
    """
    return _publish(run, repo, what, private, commit_message, token=token, endpoint=endpoint,
                    gguf=gguf, log=log)[0]  # fmt: skip


def _publish(
    run: Run | str | os.PathLike[str],
    repo: str,
    what: str,
    private: bool,
    commit_message: str | None,
    *,
    token: str | None,
    endpoint: str | None,
    gguf: bool,
    log: Callable[[str], None],
) -> tuple[str, str, list[str]]:
    """publish(); (the URL, the full repo id, the paths uploaded)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    run = open_run(run)
    if what not in WHATS:
        raise ValueError(f"what = {what!r}: publish 'merged' (the whole model) or 'adapter'.")
    if not isinstance(repo, str) or not repo.strip():
        raise ValueError("repo must name the Hub repo, e.g. 'yourname/support-agent'.")
    repo = repo.strip()
    state = run.status().get("state")
    if state != "succeeded":
        raise PublishError(
            f"Run {run.id} has not succeeded (it is {state}); publish a finished run."
        )
    endpoint = hub_endpoint(endpoint)
    api = HfApi(endpoint=endpoint, token=hub_token(token))
    user, repo_id = check_access(api, repo, endpoint)
    if what == "merged" and export.merged_model(run) is None:
        log(f"merging run {run.id} first")
        export.merge(run)
    uploads = prepare(run, what, repo_id, gguf)
    message = commit_message or f"dragonfarm: {what} model of run {run.id}"
    size = sum(len(s) if isinstance(s, bytes) else s.stat().st_size for _, s in uploads)
    try:
        with _transfer_for(endpoint):
            url = str(api.create_repo(repo_id, private=private, exist_ok=True))
            log(f"uploading {len(uploads)} files ({size / 1e6:.1f} MB) to {repo_id}")
            operations = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=s if isinstance(s, bytes)
                                             else str(s)) for p, s in uploads]  # fmt: skip
            api.create_commit(repo_id, operations=operations, commit_message=message)
    except HFValidationError as e:
        raise ValueError(f"repo = {repo!r} is not a Hub repo id: {e}") from None
    except HfHubHTTPError as e:
        raise _http_error(e, repo_id, endpoint, user) from None
    log(f"published {what} model of run {run.id} at {url}")
    return url, repo_id, [p for p, _ in uploads]


def start_publish(
    run: Run | str | os.PathLike[str],
    repo: str,
    what: str = "merged",
    private: bool = False,
    commit_message: str | None = None,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    gguf: bool = True,
) -> export_jobs.ExportJob:
    """`publish` as a background job on the run (<run>/jobs/publish-<time>/); returns at once.
    The token (found here, as `publish` finds it) reaches the job on its standard input only.
    Its result: {"url", "repo", "what", "files"}."""
    run = open_run(run)
    if what not in WHATS:
        raise ValueError(f"what = {what!r}: publish 'merged' (the whole model) or 'adapter'.")
    secret = hub_token(token)
    arguments = ["--repo", repo, "--what", what]
    arguments += ["--private"] if private else []
    arguments += ["--message", commit_message] if commit_message else []
    arguments += ["--endpoint", endpoint] if endpoint else []
    arguments += [] if gguf else ["--no-gguf"]
    return export_jobs.start_step(
        run, JOB_KIND, "dragonfarm_core.publishing", arguments, doing=f"Publishing run {run.id}",
        error=PublishError, stdin=(secret + "\n").encode(),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.publishing",
        description="Publish a run's model to the Hugging Face Hub; the token is read from stdin.",
    )
    parser.add_argument("run_dir")
    parser.add_argument("--job", help="run as the job in this folder")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--what", default="merged", choices=WHATS)
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--message", default=None)
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--no-gguf", action="store_true")
    ns = parser.parse_args(argv)
    token = sys.stdin.readline().strip()  # first, before anything else can fail
    run = open_run(ns.run_dir)

    def work() -> dict[str, Any]:
        def log(line: str) -> None:
            print(f"[dragonfarm] {line}", flush=True)

        url, repo, names = _publish(run, ns.repo, ns.what, ns.private, ns.message,
                                    token=token or None, endpoint=ns.endpoint,
                                    gguf=not ns.no_gguf, log=log)  # fmt: skip
        return {"url": url, "repo": repo, "what": ns.what, "files": names}

    if ns.job:
        return export_jobs.run_step(ns.job, work)
    work()
    return 0


if __name__ == "__main__":
    sys.exit(main())
