"""The Modelfile and the registration: the Ollama PARAMETERs read from the merged folder, the
Modelfile text, and the upload and create calls through Ollama's documented API with the
official `ollama` client (POST /api/blobs/sha256:..., then POST /api/create).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dragonfarm_core.export.ollama.template import OllamaExportError, OllamaTemplate
from dragonfarm_core.rundir import files

# How long one HTTP read may take: the blob upload of a large GGUF, Ollama's create.
# A run's Ollama files: <run>/ollama/Modelfile and the template check's record beside it.
OLLAMA_DIR = "ollama"
MODELFILE = "Modelfile"
CHECK_FILE = "template_check.json"
# What was registered last (name, url, GGUF), for the Export tab and a later session.
REGISTERED = "registered.json"
HTTP_TIMEOUT_S = 600.0
# Ollama's own default context is 4096 (2048 in older releases); a model trained for less is
# given its own, a long-context model no more than this (its KV cache grows with it).
MAX_NUM_CTX = 8192


def _token_texts(model_dir: Path, ids: Sequence[int]) -> list[str]:
    data = files.read_json(model_dir / "tokenizer.json") or {}
    added = {t.get("id"): t.get("content") for t in data.get("added_tokens") or []}
    vocab = (data.get("model") or {}).get("vocab")
    by_id = {i: t for t, i in vocab.items()} if isinstance(vocab, dict) else {}
    return [str(added.get(i) or by_id.get(i)) for i in ids if added.get(i) or by_id.get(i)]


def parameters(model_dir: str | os.PathLike[str], tmpl: OllamaTemplate) -> dict[str, Any]:
    """Ollama PARAMETERs from the merged folder: the stop strings (the family's and every eos
    token), the generation defaults of generation_config.json (greedy: temperature 0), and
    num_ctx from the model's context length (at most MAX_NUM_CTX)."""
    folder = Path(model_dir)
    gen = files.read_json(folder / "generation_config.json") or {}
    config = files.read_json(folder / "config.json") or {}
    eos = gen.get("eos_token_id", config.get("eos_token_id"))
    eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    stop = list(dict.fromkeys([*tmpl.stop, *_token_texts(folder, [int(i) for i in eos_ids])]))
    params: dict[str, Any] = {"stop": stop}
    if gen.get("do_sample") is False:
        params["temperature"] = 0.0
    else:
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"),
                             ("top_k", "top_k"), ("min_p", "min_p"),
                             ("repeat_penalty", "repetition_penalty")):  # fmt: skip
            if isinstance(gen.get(theirs), int | float):
                params[ours] = gen[theirs]
    if isinstance(gen.get("max_new_tokens"), int):
        params["num_predict"] = gen["max_new_tokens"]
    context = config.get("max_position_embeddings")
    if isinstance(context, int) and context > 0:
        params["num_ctx"] = min(context, MAX_NUM_CTX)
    return params


def _quoted(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def modelfile(gguf: str, tmpl: OllamaTemplate | None, params: dict[str, Any], title: str) -> str:
    """The Modelfile text: FROM the GGUF, TEMPLATE, SYSTEM and PARAMETERs (what `ollama create
    -f Modelfile` would register; serve_ollama sends the same through the API)."""
    lines = [f"# {title}", f"FROM {gguf}"]
    if tmpl is not None:
        lines.append(f'TEMPLATE """{tmpl.template}"""')
        if tmpl.system:
            lines.append(f'SYSTEM """{tmpl.system}"""')
    for key, value in params.items():
        for one in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {key} {_quoted(one)}")
    return "\n".join(lines) + "\n"


def explain(error: Exception, url: str, name: str) -> OllamaExportError:
    import httpx
    from ollama import ResponseError

    if isinstance(error, ConnectionError | httpx.ConnectError):
        return OllamaExportError(
            f"Ollama is not running at {url}: start it with `ollama serve` (or the Ollama app), "
            "or pass its url=. The GGUF and the Modelfile are ready; `ollama create NAME -f "
            "Modelfile` registers them by hand."
        )
    if isinstance(error, httpx.TimeoutException):
        return OllamaExportError(f"Ollama at {url} did not answer within {HTTP_TIMEOUT_S:g} s.")
    if isinstance(error, ResponseError):
        status = f"HTTP {error.status_code}" if error.status_code > 0 else "an error"
        return OllamaExportError(
            f"Ollama at {url} refused to create {name!r} ({status}): {error.error}"
        )
    return OllamaExportError(f"Ollama at {url} failed: {type(error).__name__}: {error}")


def register(
    client: Any,
    name: str,
    gguf: Path,
    tmpl: OllamaTemplate | None,
    params: dict[str, Any],
    log: Callable[[str], None] = print,
) -> None:
    """Upload the GGUF as a blob and create model `name` from it (Ollama's /api/blobs and
    /api/create), through the official client `client` (an `ollama.Client`)."""
    log(f"uploading {gguf.name} ({gguf.stat().st_size / 1e6:.1f} MB) to Ollama")
    digest = client.create_blob(gguf)
    log(f"creating {name} from {digest[:19]}…")
    extra: dict[str, Any] = {}
    if tmpl is not None:
        extra["template"] = tmpl.template
        if tmpl.system:
            extra["system"] = tmpl.system
    last = None
    for part in client.create(model=name, files={gguf.name: digest}, parameters=params,
                              stream=True, **extra):  # fmt: skip
        if part.status and part.status != last:
            log(f"ollama: {part.status}")
            last = part.status
    if last != "success":
        raise OllamaExportError(f"Ollama did not confirm creating {name!r} (last: {last!r}).")
