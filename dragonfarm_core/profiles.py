"""Deployment profiles: how the app is deployed, as policy the core owns.

A `Profile` says which interface the server binds, where runs live, how large uploads may be,
which host names it answers to, and which features are on. The app asks it what a page may
offer (`refusal(feature)`); the core functions themselves take the runs dir they are given and
know nothing of profiles or Gradio.

    local   a laptop: 127.0.0.1, ./dragonfarm_runs, everything on
    spaces  a Hugging Face Space: 0.0.0.0:7860 behind its proxy, runs under /data (its
            persistent disk) or a temporary folder that vanishes on restart; nothing that runs
            code the user wrote (command and custom rewards)

`--profile` or DRAGONFARM_PROFILE picks one; `dragonfarm check` and the app's header say which
is active and what it turns off.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PROFILE_ENV = "DRAGONFARM_PROFILE"
RUNS_DIR_ENV = "DRAGONFARM_RUNS_DIR"
SPACES_DATA = Path("/data")  # a Space's persistent storage, when it has some
# A folder standing in for /data: a self-hosted copy of the Space image, or a test.
SPACES_DATA_ENV = "DRAGONFARM_SPACES_DATA"

# Features a profile can turn off, and what each one is, in the words a refusal uses.
USER_CODE = "user_code"
FEATURES = {
    USER_CODE: "command and custom rewards, which run code you wrote",
}
FEATURE_NAMES = {USER_CODE: "command and custom rewards"}
USER_CODE_REWARDS = ("command", "custom")


@dataclass(frozen=True)
class Profile:
    """How the app is deployed: who can reach it, where runs live and what it accepts."""

    name: str
    host: str  # the interface the server binds to
    max_upload_mb: int  # uploads larger than this are refused (by Gradio and by the Data tab)
    default_runs_dir: str  # used when neither --runs-dir nor DRAGONFARM_RUNS_DIR is given
    # One request's uploads together are capped at max_upload_mb; a browser session's at this.
    max_session_upload_mb: int = 4096
    # Host names the app answers to besides loopback and its --host (see http_guard).
    allowed_hosts: tuple[str, ...] = ()
    # Feature -> why it is off here (FEATURES names them). Empty: everything is on.
    off: dict[str, str] = field(default_factory=dict)
    # The default runs folder does not survive a restart (a Space without persistent storage).
    ephemeral_runs: bool = False

    def refusal(self, feature: str) -> str | None:
        """None when `feature` is on, else a sentence saying it is off, why, and where it works."""
        if feature not in self.off:
            return None
        return (
            f"The {self.name!r} profile turns off {FEATURES[feature]}: {self.off[feature]} "
            "Run dragonfarm on your own machine (profile 'local') to use them."
        )

    def reward_refusal(self, reward_type: str) -> str | None:
        """Why a reward of this type may not be used here, or None."""
        return self.refusal(USER_CODE) if reward_type in USER_CODE_REWARDS else None

    def summary(self) -> str:
        """One line for `dragonfarm check` and the app's header."""
        notes = [f"off: {FEATURE_NAMES[f]}" for f in self.off]
        if self.ephemeral_runs:
            notes.append("its default runs folder is temporary")
        return f"profile {self.name!r}" + (f" ({'; '.join(notes)})" if notes else "")


def _spaces() -> Profile:
    data = Path(os.environ.get(SPACES_DATA_ENV) or SPACES_DATA)
    persistent = data.is_dir() and os.access(data, os.W_OK)
    runs = data / "dragonfarm_runs" if persistent else Path(tempfile.gettempdir())
    return Profile(
        "spaces",
        "0.0.0.0",
        200,
        str(runs if persistent else runs / "dragonfarm_runs"),
        max_session_upload_mb=1000,
        # A Space reaches the app through its proxy, under the name in SPACE_HOST (set by
        # Hugging Face).
        allowed_hosts=tuple(filter(None, [os.environ.get("SPACE_HOST")])),
        off={USER_CODE: "anyone who can open the Space could run programs in it."},
        ephemeral_runs=not persistent,
    )


def profile_names() -> list[str]:
    return ["local", "spaces"]


def get_profile(name: str | None = None) -> Profile:
    """The named profile, else DRAGONFARM_PROFILE's, else `local`."""
    name = (name or os.environ.get(PROFILE_ENV) or "local").strip().lower()
    if name == "local":
        return Profile("local", "127.0.0.1", 1024, "dragonfarm_runs")
    if name == "spaces":
        return _spaces()  # read now: /data and SPACE_HOST are the Space's, at start-up
    if name == "lab":
        raise ValueError(
            "The 'lab' profile (login, per-user runs) is not available in this version; "
            "use --profile local, or put the app behind your own login proxy."
        )
    raise ValueError(f"Unknown profile {name!r}; use one of {', '.join(profile_names())}.")


def runs_dir_for(runs_dir: str | os.PathLike[str] | None, profile: Profile) -> Path:
    """Where the app keeps runs: the argument, else DRAGONFARM_RUNS_DIR, else the profile's."""
    chosen = runs_dir or os.environ.get(RUNS_DIR_ENV) or profile.default_runs_dir
    return Path(chosen).expanduser().resolve()
