"""`serve_ollama(run)`: a run's model registered with Ollama, and the backend that talks to it.

    backend = dragon.serve_ollama(run)                  # merged, GGUF'd, registered as run.id
    dragon.generate(run, "My thermostat is offline", backend=backend)

Steps, each skipped when already done: merge the run (`export.merge`, <run>/merged/), export
the merged folder to GGUF with llama.cpp (`gguf.export_gguf`), translate the model's chat
template (Jinja, what training used) into the Go template Ollama renders, prove the
translation, write <run>/ollama/Modelfile, and register the model through Ollama's
documented API with the official `ollama` client: the GGUF as a blob (POST
/api/blobs/sha256:...), then POST /api/create with the file's digest, the template, the system
prompt and the parameters. Returns `backend_ollama(name, url)`.

The template is where exports go wrong ("my model is worse in Ollama"), so it is translated
from what the model's own template renders, not picked by name. For each family the presets
use (ChatML, Qwen, Llama 3, Gemma) a Go template of that family's layout is filled in with what
probing the Jinja template shows: the default system prompt it adds (SmolLM2's, Qwen's: the
Modelfile's SYSTEM, which Ollama inserts exactly when the template would), the text its system
block starts with (Llama 3's knowledge-cutoff and date lines), and the begin-of-sequence token
it writes (left to the tokenizer, as llama.cpp adds it from the GGUF). Then the check: fixed
conversations and the run's held-out prompts are rendered by the Jinja template and by the Go
template as Ollama runs it (its default system prompt, consecutive turns of one role merged,
`gotemplate`), and the two strings must be equal; the first difference is named by token
(the merged tokenizer) and character. A mismatch stops the export before anything is
registered; the record is <run>/ollama/template_check.json.

Known limits: Go templates cannot trim, so a message with leading or trailing spaces reads
differently for templates that trim content (Gemma, Llama 3); Llama 3's "Today Date" is the
export's date. A template of another family is refused with its name; `template="embedded"`
lets Ollama use the GGUF's own chat template instead, and any Go template may be given.
No torch: the app and a job (`python -m dragonfarm_core.serve.ollama`) both run this.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core import chat_template
from dragonfarm_core.export import jobs as export_jobs
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.ollama import gotemplate
from dragonfarm_core.export.ollama.check import (
    FIXED_CONVERSATIONS,
    check_template,
    describe_difference,
    eval_conversations,
    load_tokenizer,
)
from dragonfarm_core.export.ollama.register import (
    CHECK_FILE,
    HTTP_TIMEOUT_S,
    MODELFILE,
    OLLAMA_DIR,
    REGISTERED,
    explain,
    modelfile,
    parameters,
    register,
)
from dragonfarm_core.export.ollama.template import (
    EMBEDDED,
    OllamaExportError,
    OllamaTemplate,
    TemplateMismatch,
    translate,
)
from dragonfarm_core.export.ollama.template import (
    UnknownTemplateFamily as UnknownTemplateFamily,  # raised by serve_ollama: importable here
)
from dragonfarm_core.inference.ollama import DEFAULT_URL, OllamaBackend, backend_ollama
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.atomic import write_atomic
from dragonfarm_core.rundir.run import Run, open_run

JOB_KIND = "ollama"


def default_name(run: Run) -> str:
    """An Ollama model name for the run: its id, lower case, in the characters names allow."""
    name = re.sub(r"[^a-z0-9._-]+", "-", run.id.lower()).strip("-.")
    return name or "dragonfarm-model"


def _check_name(name: str) -> str:
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*(:[A-Za-z0-9._-]+)?", name):
        raise ValueError(
            f"name = {name!r} is not an Ollama model name: letters, digits, '.', '_', '-', an "
            "optional namespace/ and :tag, e.g. 'support-agent:v1'."
        )
    return name


# --- the whole step -----------------------------------------------------------------------------


def _gguf_for(merged: Path, quantize: str | None, log: Callable[[str], None]) -> Path:
    """The merged folder's GGUF of that type (<run>/merged-<quant>.gguf), exported and
    round-trip checked by llama.cpp (`gguf.export_gguf`) unless it is there already (a GGUF
    takes its name only once its check has passed)."""
    from dragonfarm_core.export import gguf as gguf_export

    quant = gguf_export.normalize_quant(quantize or "q8_0")
    existing = gguf_export.default_out_file(merged, quant)
    if existing.is_file():
        log(f"using the GGUF exported earlier: {existing}")
        return existing
    log(f"exporting {merged} to GGUF ({quant}) with llama.cpp, then checking it")
    return Path(gguf_export.export_gguf(merged, quant=quant))


def serve_ollama(
    run: Run | str | os.PathLike[str],
    name: str | None = None,
    quantize: str | None = None,
    ollama: Any = None,
    url: str = DEFAULT_URL,
    *,
    template: str | None = None,
    gguf: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
) -> OllamaBackend:
    """Serve a succeeded run with Ollama; returns `backend_ollama(name, url)`.

    name: the Ollama model name (default: the run's id). quantize: the GGUF type llama.cpp
    writes (default q8_0; f16, bf16, or a llama-quantize type such as q4_k_m). ollama: an
    `ollama.Client` to register through (default: one for `url`; the backend returned talks
    to `url` either way). template: None translates the model's
    chat template and checks it (refusing a mismatch), "embedded" leaves the template to the
    GGUF's own, any other text is a Go template of your own (checked, a mismatch reported).
    gguf: a GGUF file to register instead of exporting one. Merging and exporting are skipped
    when done already. Raises OllamaExportError (Ollama not running, refused, a template
    mismatch), UnknownTemplateFamily.
    """
    run = open_run(run)
    name = _check_name(name or default_name(run))
    url = (url or DEFAULT_URL).strip().rstrip("/")
    merged = export.merged_model(run)
    if merged is None:
        log(f"merging run {run.id} first")
        merged = export.merge(run)
    out = run.dir / OLLAMA_DIR
    out.mkdir(exist_ok=True)
    tmpl = _checked_template(run, merged, template, out, log)
    gguf_path = Path(gguf).expanduser().resolve() if gguf else _gguf_for(merged, quantize, log)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"gguf = {gguf_path} is not a file.")
    params = parameters(merged, tmpl or OllamaTemplate(EMBEDDED, ""))
    shown = os.path.relpath(gguf_path, out) if gguf_path.is_relative_to(run.dir) else gguf_path
    text = modelfile(str(shown), tmpl, params,
                     f"dragonfarm: run {run.id} for Ollama (`ollama create {name} -f Modelfile`)")  # fmt: skip
    write_atomic(out / MODELFILE, lambda f: f.write(text))
    _register_at(ollama, url, name, gguf_path, tmpl, params, log)
    files.write_json(out / REGISTERED, {"name": name, "url": url, "gguf": str(gguf_path),
                                        "registered_at": files.now_iso()})  # fmt: skip
    log(f"registered {name!r} with Ollama at {url}")
    return backend_ollama(name, url=url)


def _checked_template(
    run: Run, merged: Path, template: str | None, out: Path, log: Callable[[str], None]
) -> OllamaTemplate | None:
    """The template to register (None: the GGUF's own), checked against the model's chat
    template and the record written to <run>/ollama/template_check.json. A translation that
    renders differently is refused (TemplateMismatch); a Go template of the user's own is
    reported."""
    source, tokens = chat_template.load_chat_template(merged)
    tmpl: OllamaTemplate | None
    if template == EMBEDDED:
        tmpl, check = None, {"identical": None, "family": EMBEDDED, "checked_at": files.now_iso()}
    else:
        if template is None:
            tmpl = translate(source, tokens)
        else:
            gotemplate.parse(template)  # refuse what Ollama's Go would reject
            tmpl = OllamaTemplate("custom", template)
        conversations = [("fixed", list(c)) for c in FIXED_CONVERSATIONS]
        conversations += [("eval", c) for c in eval_conversations(run.dir)]
        check = check_template(tmpl, source, tokens, conversations, load_tokenizer(merged))
        log(f"template check ({tmpl.label}): {describe_difference(check)} "
            f"({check['checked']} conversations)")  # fmt: skip
    files.write_json(out / CHECK_FILE, check)
    if tmpl is not None and not check["identical"]:
        message = (
            f"The {tmpl.label} template for Ollama renders differently from the model's chat "
            f"template: {describe_difference(check)}. Nothing was registered; the record is "
            f"{out / CHECK_FILE}."
        )
        if template is None:
            raise TemplateMismatch(message + f" Pass template={EMBEDDED!r} to use the GGUF's own.")
        log(f"warning: {message}")
    return tmpl


def _register_at(
    ollama: Any,
    url: str,
    name: str,
    gguf_path: Path,
    tmpl: OllamaTemplate | None,
    params: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """Register through `ollama` (default: a client for `url`), every failure explained."""
    if ollama is None:
        from ollama import Client

        ollama = Client(host=url, timeout=HTTP_TIMEOUT_S)
    try:
        ollama.list()  # is it there at all, before a large upload
        register(ollama, name, gguf_path, tmpl, params, log)
    except OllamaExportError:
        raise
    except Exception as e:
        raise explain(e, url, name) from None


def start_serve_ollama(
    run: Run | str | os.PathLike[str],
    name: str | None = None,
    quantize: str | None = None,
    url: str = DEFAULT_URL,
    *,
    template: str | None = None,
    gguf: str | os.PathLike[str] | None = None,
) -> export_jobs.ExportJob:
    """`serve_ollama` as a background job on the run (<run>/jobs/ollama-<time>/); returns at
    once. Its result: {"name", "url", "modelfile", "gguf", "template_check"}."""
    run = open_run(run)
    name = _check_name(name or default_name(run))
    arguments = ["--name", name, "--url", url]
    arguments += ["--quantize", quantize] if quantize else []
    arguments += ["--template", template] if template else []
    arguments += ["--gguf", str(Path(gguf).expanduser().resolve())] if gguf else []
    return export_jobs.start_step(
        run, JOB_KIND, "dragonfarm_core.serve.ollama", arguments,
        doing=f"Serving run {run.id} with Ollama", error=OllamaExportError,
    )  # fmt: skip


def result_of(run: Run, name: str, url: str) -> dict[str, Any]:
    """What a finished `serve_ollama` left in <run>/ollama/, with the model's name and URL."""
    out = run.dir / OLLAMA_DIR
    registered = files.read_record(out / REGISTERED) or {}
    return {
        "name": name,
        "url": url,
        "modelfile": str(out / MODELFILE),
        "gguf": registered.get("gguf"),
        "template_check": files.read_record(out / CHECK_FILE),
    }


def main(argv: list[str] | None = None) -> int:
    parser = export_jobs.step_parser(
        "dragonfarm_core.serve.ollama",
        "Merge, export to GGUF and register a run with Ollama.",
    )
    parser.add_argument("--name", default=None)
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--template", default=None)
    parser.add_argument("--gguf", default=None, help="register this GGUF instead of exporting one")
    ns = parser.parse_args(argv)
    run = open_run(ns.run_dir)
    name = ns.name or default_name(run)

    def work() -> dict[str, Any]:
        serve_ollama(run, name, ns.quantize, url=ns.url, template=ns.template, gguf=ns.gguf,
                     log=export_jobs.step_log)  # fmt: skip
        return result_of(run, name, ns.url)

    return export_jobs.run_main(ns.job, work)


if __name__ == "__main__":
    sys.exit(main())
