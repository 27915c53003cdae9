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
not offer Xet. No torch: the app and the job (`python -m dragonfarm_core.export.publishing`) run this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core.export import jobs as export_jobs
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.hub import (
    PublishError,
    check_access,
    http_error,
    hub_endpoint,
    hub_token,
    transfer_for,
)
from dragonfarm_core.export.model_card import CARD, LOSS_IMAGE, loss_curve, model_card
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run, open_run

JOB_KIND = "publish"
WHATS = ("merged", "adapter")
# Never uploaded from the merged folder: dragonfarm's bookkeeping (the card replaces README.md).
LEFT_HOME = frozenset({export.COMPLETE, export.CHECK_FILE, CARD})


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


def _check_what(what: str) -> None:
    if what not in WHATS:
        raise ValueError(f"what = {what!r}: publish 'merged' (the whole model) or 'adapter'.")


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
    _check_what(what)
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
        with transfer_for(endpoint):
            url = str(api.create_repo(repo_id, private=private, exist_ok=True))
            log(f"uploading {len(uploads)} files ({size / 1e6:.1f} MB) to {repo_id}")
            operations = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=s if isinstance(s, bytes)
                                             else str(s)) for p, s in uploads]  # fmt: skip
            api.create_commit(repo_id, operations=operations, commit_message=message)
    except HFValidationError as e:
        raise ValueError(f"repo = {repo!r} is not a Hub repo id: {e}") from None
    except HfHubHTTPError as e:
        raise http_error(e, repo_id, endpoint, user) from None
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
    _check_what(what)
    secret = hub_token(token)
    arguments = ["--repo", repo, "--what", what]
    arguments += ["--private"] if private else []
    arguments += ["--message", commit_message] if commit_message else []
    arguments += ["--endpoint", endpoint] if endpoint else []
    arguments += [] if gguf else ["--no-gguf"]
    return export_jobs.start_step(
        run, JOB_KIND, "dragonfarm_core.export.publishing", arguments, doing=f"Publishing run {run.id}",
        error=PublishError, stdin=(secret + "\n").encode(),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = export_jobs.step_parser(
        "dragonfarm_core.export.publishing",
        "Publish a run's model to the Hugging Face Hub; the token is read from stdin.",
    )
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
        url, repo, names = _publish(run, ns.repo, ns.what, ns.private, ns.message,
                                    token=token or None, endpoint=ns.endpoint,
                                    gguf=not ns.no_gguf, log=export_jobs.step_log)  # fmt: skip
        return {"url": url, "repo": repo, "what": ns.what, "files": names}

    return export_jobs.run_main(ns.job, work)


if __name__ == "__main__":
    sys.exit(main())
