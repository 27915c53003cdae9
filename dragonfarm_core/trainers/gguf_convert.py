"""A merged model folder as a GGUF, written by llama.cpp's own tools only: `convert_hf_to_gguf.py`
(f32/f16/bf16/q8_0 directly; any other type through an f16 file and `llama-quantize`), and the
type a GGUF's metadata names (`file_type`). `gguf_run` calls it for an export.

The converter reads a SentencePiece model's special tokens from tokenizer_config.json's
`added_tokens_decoder`, and whether to add a BOS from its `add_bos_token`; transformers 5 writes
neither (it keeps both in tokenizer.json). Without them ChatML's <|im_start|> becomes five
ordinary pieces in the GGUF and llama.cpp puts a BOS the model never saw before every prompt:
the check caught both on the bundled model. So the converter is given a staged view of the
folder (links to every file) whose tokenizer_config.json carries them, taken from
tokenizer.json; the folder itself is left as it is. The check is what proves the result: it
compares token ids, not file contents.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core.export import gguf_files
from dragonfarm_core.llamacpp.location import QUANTIZE, LlamaCpp
from dragonfarm_core.rundir import files

THREADS = 2
# The converter's staged input and intermediate files: <temp GGUF><STAGE_SUFFIX>/.
STAGE_SUFFIX = ".stage"


def added_tokens_decoder(tokenizer_json: Any) -> dict[str, dict[str, Any]] | None:
    """tokenizer.json's added tokens in tokenizer_config.json's `added_tokens_decoder` form,
    or None when there are none."""
    added = tokenizer_json.get("added_tokens") if isinstance(tokenizer_json, dict) else None
    if not added:
        return None
    return {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}


def special_flags(tokenizer_json: Any) -> dict[str, bool]:
    """add_bos_token / add_eos_token as tokenizer.json's post-processor applies them (a
    TemplateProcessing whose single-sequence template starts / ends with a special token);
    empty when it has none to read."""
    post = tokenizer_json.get("post_processor") if isinstance(tokenizer_json, dict) else None
    for processor in (post or {}).get("processors", [post] if post else []):
        if processor.get("type") == "TemplateProcessing":
            single = processor.get("single") or []
            return {"add_bos_token": bool(single) and "SpecialToken" in single[0],
                    "add_eos_token": bool(single) and "SpecialToken" in single[-1]}  # fmt: skip
    return {}


def stage(merged: Path, into: Path) -> Path:
    """A view of `merged` for the converter in `into`: a link to each file, and a
    tokenizer_config.json completed with what transformers 5 keeps in tokenizer.json only:
    the added tokens (`added_tokens_decoder`) and whether a BOS/EOS is added (see above), and
    without a chat template of its own when chat_template.jinja, the one transformers uses,
    is there."""
    into.mkdir(parents=True, exist_ok=True)
    for path in merged.iterdir():
        if path.name != "tokenizer_config.json":
            (into / path.name).symlink_to(path.resolve())
    config = files.read_json(merged / "tokenizer_config.json")
    if isinstance(config, dict):
        tokenizer_json = files.read_json(merged / "tokenizer.json")
        table = added_tokens_decoder(tokenizer_json)
        if table and not config.get("added_tokens_decoder"):
            config["added_tokens_decoder"] = table
        for key, value in special_flags(tokenizer_json).items():
            config.setdefault(key, value)
        if (merged / "chat_template.jinja").is_file():
            # transformers renders with chat_template.jinja when there is one; the converter
            # would prefer a (stale) copy in tokenizer_config.json.
            config.pop("chat_template", None)
        files.write_json(into / "tokenizer_config.json", config)
    return into


def run_logged(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a llama.cpp tool with its output in this job's log; raise naming it when it fails."""
    print(f"[dragonfarm] running {' '.join(argv)}", flush=True)
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{Path(argv[1] if argv[0] == sys.executable else argv[0]).name} exited with "
            f"status {done.returncode}; its output is in the log above."
        )


def convert(tools: LlamaCpp, merged: Path, out: Path, quant: str) -> None:
    """Write `merged` as a GGUF of type `quant` to `out`, with llama.cpp's tools only (the
    staged input and an f16 intermediate go to <out>.stage/, removed after)."""
    env = tools.converter_env()
    env["TQDM_DISABLE"] = "1"  # one line per tensor is enough in a job log
    env["NO_LOCAL_GGUF"] = "1"  # gguf-py comes from PYTHONPATH (the same tree), as set above
    work = out.with_name(out.name + STAGE_SUFFIX)
    try:
        staged = stage(merged, work / "model")
        direct = quant in gguf_files.DIRECT_QUANTS
        target = out if direct else work / "f16.gguf"
        run_logged([sys.executable, str(tools.converter), str(staged), "--outfile", str(target),
                    "--outtype", quant if direct else "f16"], env=env)  # fmt: skip
        if not direct:
            run_logged([str(tools.binary(QUANTIZE)), str(target), str(out),
                        gguf_files.QUANTIZE_TYPES[quant], str(THREADS)])  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not out.is_file():
        raise RuntimeError(f"llama.cpp's tools ended without writing {out}.")


def file_type(tools: LlamaCpp, path: Path) -> str:
    """The GGUF's type as dragonfarm names it (f16, q8_0, q4_k_m...), from its metadata."""
    if str(tools.gguf_py) not in sys.path:
        sys.path.insert(0, str(tools.gguf_py))
    gguf_py: Any = importlib.import_module("gguf")  # llama.cpp's own reader, of the same tree

    reader = gguf_py.GGUFReader(str(path))
    field = reader.get_field("general.file_type")
    if field is None:
        return "unknown"
    name = gguf_py.LlamaFileType(int(field.contents())).name
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").lower()
