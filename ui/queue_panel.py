"""The machine's device queue for everyone to see, and the per-user cap on queued runs (lab).

The queue is the machine-wide one of `dragonfarm_core.rundir.queue`: a ticket per live job
process, each naming its job's folder and device. In the lab profile a job's folder lies in its
user's folder (`<lab root>/users/<name>/...`), which says whose it is. The panel lists every
ticket, running first, then queued in order, per device; when the profile anonymises the queue
a user who is not an admin sees other users' runs as "another user", without their run ids.

The cap: a user with `max_queued_per_user` jobs queued or running may not queue another.
`install` makes every device job the app process starts (a training, a resume, an evaluation,
an export) ask `admit` first, so no tab can start around it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.rundir import files, jobs, queue
from ui import per_user

COLUMNS = ["device", "place", "user", "run"]
ANOTHER = "another user"
REFRESH_S = 3.0
EMPTY = "No run is queued or training on this machine."


def owner(job_dir: str | Path, profile: Profile) -> str | None:
    """The lab user (or Space visitor) whose folder holds `job_dir`, or None (a job from
    outside their folders)."""
    if not profile.owners_root:
        return None
    users_root = Path(profile.owners_root).resolve()
    path = Path(job_dir).resolve()
    return path.relative_to(users_root).parts[0] if path.is_relative_to(users_root) else None


def _run_name(job_dir: str | Path, profile: Profile, user: str | None) -> str:
    """The run's id (a job in a run's jobs/ folder shows as `<run id> (<job>)`)."""
    path = Path(job_dir).resolve()
    if user is None:
        return path.name
    parts = path.relative_to(Path(profile.runs_dir_for_user(user)).resolve()).parts
    return parts[0] if len(parts) == 1 else f"{parts[0]} ({parts[-1]})"


def rows(profile: Profile, viewer: str | None) -> list[dict[str, Any]]:
    """The queue as `viewer` may see it: per device, running jobs, then queued ones in order."""
    hidden = profile.anonymise_queue and not profile.is_admin(viewer)
    places: dict[str, int] = {}
    listed = []
    for ticket in queue.tickets():
        key, job_dir = str(ticket.get("key")), str(ticket.get("run_dir"))
        user = owner(job_dir, profile)
        if ticket.get("state") == "running":
            place = "running"
        else:
            places[key] = places.get(key, 0) + 1
            place = f"queued #{places[key]}"
        theirs = user != viewer
        listed.append({
            "device": key,
            "place": place,
            "user": ANOTHER if hidden and theirs else (user or "(outside the lab)"),
            "run": "" if hidden and theirs else _run_name(job_dir, profile, user),
        })  # fmt: skip
    return listed


def table(profile: Profile) -> tuple[pd.DataFrame, str]:
    """The panel for the request being handled: (table, a line saying how full the queue is)."""
    viewer = per_user.request_user(profile)
    listed = rows(profile, viewer)
    mine = sum(1 for row in listed if viewer and row["user"] == viewer)
    cap = profile.max_queued_per_user
    note = EMPTY if not listed else f"{len(listed)} job(s) queued or training on this machine."
    if viewer and cap is not None:
        note += f" Yours: {mine} of at most {cap}."
    return pd.DataFrame(listed, columns=COLUMNS), note


def active_jobs_of(profile: Profile, user: str) -> int:
    """How many of `user`'s jobs are queued or running on this machine."""
    return sum(1 for t in queue.tickets() if owner(str(t.get("run_dir")), profile) == user)


def cap_refusal(profile: Profile, job_dir: str | Path) -> str | None:
    """Why a device job in `job_dir` may not be queued now (its user is at the cap), or None."""
    cap, user = profile.max_queued_per_user, owner(job_dir, profile)
    if cap is None or user is None:
        return None
    count = active_jobs_of(profile, user)
    if count >= cap:
        where = "this Space" if profile.visitors else "this workstation"
        return (
            f"You have {count} run(s) queued or training already, the most {where} allows "
            f"per {profile.owner_noun} ({cap}); wait for one to finish, or cancel one in the "
            "Monitor tab, then start this again."
        )
    return kept_runs_refusal(profile, user, Path(job_dir))


def kept_runs_refusal(profile: Profile, user: str, job_dir: Path) -> str | None:
    """Why `user` may not start a new run in `job_dir`: they keep `max_runs_per_owner` runs
    already, archived ones included (they hold disk too). A job on a run they have (an
    evaluation, a resume) is not a new run."""
    cap, home = profile.max_runs_per_owner, Path(profile.runs_dir_for_user(user)).resolve()
    if cap is None or not home.is_dir():
        return None
    run = home / job_dir.resolve().relative_to(home).parts[0]
    folders = [*home.iterdir(), *(home / files.ARCHIVED_DIR).glob("*")]
    kept = sum(1 for p in folders if p != run and files.is_run_dir(p))
    if kept < cap:
        return None
    return (
        f"You keep {kept} runs (archived ones included), the most a {profile.owner_noun} may "
        f"keep here ({cap}); delete one in the Runs tab, then start this again. On your own "
        "machine (profile 'local') there is no such cap."
    )


def admit(profile: Profile, job_dir: Path, device: str) -> None:
    """`jobs.admission` for the lab and Spaces: refuse a job whose owner is at a cap."""
    refusal = cap_refusal(profile, job_dir)
    if refusal:
        raise RuntimeError(refusal)


def install(profile: Profile) -> None:
    """Make every device job this process starts pass `admit` (lab users, Space visitors)."""
    if profile.owners_root and profile.max_queued_per_user is not None:
        jobs.admission = partial(admit, profile)


def build(profile: Profile) -> None:
    """The panel (elem_id lab-queue), refreshed every few seconds; only with login."""
    if not profile.login:
        return
    with gr.Accordion("The machine's training queue (every user's runs)", open=True):
        note = gr.Markdown(EMPTY, elem_id="lab-queue-note")
        listing = gr.Dataframe(
            pd.DataFrame(columns=COLUMNS), interactive=False, wrap=True, elem_id="lab-queue"
        )
    gr.Timer(REFRESH_S).tick(partial(table, profile), None, [listing, note], show_progress="hidden")
