"""Deployment profiles: how the app is deployed, as policy the core owns.

A `Profile` says which interface the server binds, where runs live, how large uploads may be,
which host names it answers to, and which features are on. The app asks it what a page may
offer (`refusal(feature)`); the core functions themselves take the runs dir they are given and
know nothing of profiles or Gradio.

    local   a laptop: 127.0.0.1, ./dragonfarm_runs, everything on
    lab     a shared workstation: login on every page and API route (the users file, or a
            reverse proxy's user header), each user's runs under <lab root>/users/<name>/,
            a cap on queued runs per user; binds 0.0.0.0 only with its own login on
    spaces  a Hugging Face Space: 0.0.0.0:7860 behind its proxy, runs under /data (its
            persistent disk) or a temporary folder that vanishes on restart; each visitor (a
            browser, by a long-lived cookie: dragonfarm_core.auth.visitors) has their own runs under
            <runs>/visitors/<id>/, one queued run and a few kept runs at most; nothing that
            runs code the user wrote (command and custom rewards)

`--profile` or DRAGONFARM_PROFILE picks one; `dragonfarm check` and the app's header say which
is active and what it turns off.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from dragonfarm_core.auth import users
from dragonfarm_core.auth.http_guard import ANY_INTERFACE
from dragonfarm_core.auth.visitors import VISITORS_DIR

PROFILE_ENV = "DRAGONFARM_PROFILE"
RUNS_DIR_ENV = "DRAGONFARM_RUNS_DIR"
# The lab profile's settings, read when the profile is made (at start-up).
LAB_ROOT_ENV = "DRAGONFARM_LAB_ROOT"
USER_HEADER_ENV = "DRAGONFARM_USER_HEADER"
MAX_QUEUED_ENV = "DRAGONFARM_MAX_QUEUED"
MAX_RUNS_ENV = "DRAGONFARM_MAX_RUNS"  # a Space visitor's kept runs
ANONYMISE_QUEUE_ENV = "DRAGONFARM_ANONYMISE_QUEUE"
SESSION_HOURS_ENV = "DRAGONFARM_SESSION_HOURS"
DEFAULT_LAB_ROOT = "dragonfarm_lab"
USERS_DIR = "users"  # <lab root>/users/<name>/ is a user's runs dir
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
    # The disk all uploads may take together, whoever sends them (upload_disk.py).
    max_total_upload_mb: int = 20480
    # Host names the app answers to besides loopback and its --host (see http_guard).
    allowed_hosts: tuple[str, ...] = ()
    # Feature -> why it is off here (FEATURES names them). Empty: everything is on.
    off: dict[str, str] = field(default_factory=dict)
    # The default runs folder does not survive a restart (a Space without persistent storage).
    ephemeral_runs: bool = False
    # lab: every page and API route needs a logged-in user (the users file, or user_header).
    login: bool = False
    lab_root: str | None = None  # users' runs live under <lab_root>/users/<name>/
    users_file: str | None = None  # who may log in; <lab_root>/users.json by default
    # Trust this reverse-proxy header for the user's name instead of our login page; only
    # when the admin sets it (anyone who can reach the app directly could send the header).
    user_header: str | None = None
    max_queued_per_user: int | None = None  # queued or running runs one user may have
    # Each owner's runs folder is <owners_root>/<owner>/: a lab user's (login) or a Space
    # visitor's (`visitors`). None: the app's runs folder is everyone's (local).
    owners_root: str | None = None
    visitors: bool = False  # spaces: an owner is a browser, by its visitor cookie
    max_runs_per_owner: int | None = None  # runs (archived ones too) one owner may keep
    # The chat may reach loopback and private addresses a person types (dragonfarm_core.
    # url_guard); not on a shared app, unless the admin allows them.
    private_backends: bool = True
    anonymise_queue: bool = False  # the queue shows other users' runs without their names
    session_hours: float | None = None  # a login lasts this long (None: until the app stops)

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

    @property
    def owner_noun(self) -> str:
        """What an owner of runs is called in messages: a user (lab) or a visitor (a Space)."""
        return "visitor" if self.visitors else "user"

    def runs_dir_for_user(self, user: str) -> Path:
        """`<owners_root>/<user>/` (the lab's `<lab_root>/users/<user>/`), for a valid user
        name or visitor id (not created here)."""
        if self.owners_root is None:
            raise ValueError(f"The {self.name!r} profile has no per-user runs (no lab root).")
        return Path(self.owners_root) / users.check_name(user)

    def with_runs_dir(self, folder: Path) -> Profile:
        """This profile serving `folder`: a Space's visitors get their folders under it."""
        if not self.visitors:
            return self
        return replace(self, owners_root=str(Path(folder) / VISITORS_DIR))

    def is_admin(self, user: str | None) -> bool:
        """Whether the users file marks `user` as an admin (who sees every run, read-only)."""
        if not user or self.users_file is None:
            return False
        return users.is_admin(self.users_file, user)

    def bind_refusal(self, server_name: str | None) -> str | None:
        """Why the app may not bind `server_name` under this profile, or None. The lab
        profile listens on every interface only with its own login: with login off anyone
        on the network could use it, and with `user_header` anyone who reaches the port
        without the proxy could send the header. local (no login) never binds every interface;
        a Space does, behind its proxy."""
        if (server_name or "").strip().lower() not in ANY_INTERFACE or self.name == "spaces":
            return None  # a Space is reached only through its proxy, which needs every interface
        if self.name == "local":
            return (
                f"Refusing to bind {server_name!r} under the local profile: it has no login, so "
                "everyone on the network could use the app, its runs and its GPUs. For several "
                "people use --profile lab (logins, each user's own runs); to reach your own "
                "app from another machine, bind 127.0.0.1 and use an SSH tunnel (ssh -L "
                "7860:127.0.0.1:7860 this-machine) or a reverse proxy with --allowed-hosts."
            )
        if not self.login:
            return (
                f"Refusing to bind {server_name!r} with login off: everyone on the network "
                "could use the app and its GPUs. Keep login on (the lab profile's users file) "
                "or bind 127.0.0.1."
            )
        if self.user_header:
            return (
                f"Refusing to bind {server_name!r} with {USER_HEADER_ENV}={self.user_header}: "
                "anyone who reaches the port without your proxy could send that header and "
                "be any user. Bind the address only the proxy reaches (127.0.0.1 when it runs "
                f"here), or unset {USER_HEADER_ENV} to use the app's own login."
            )
        return None

    def summary(self) -> str:
        """One line for `dragonfarm check` and the app's header."""
        notes = [f"off: {FEATURE_NAMES[f]}" for f in self.off]
        if self.ephemeral_runs:
            notes.append("its default runs folder is temporary")
        if self.login:
            how = f"the {self.user_header} header" if self.user_header else "the users file"
            notes.append(f"login required ({how}); each user has their own runs")
        if self.visitors:
            notes.append("each visitor (this browser) sees and changes only their own runs")
        if self.max_queued_per_user is not None:
            notes.append(f"at most {self.max_queued_per_user} queued runs per {self.owner_noun}")
        if self.max_runs_per_owner is not None:
            notes.append(f"at most {self.max_runs_per_owner} kept runs per {self.owner_noun}")
        return f"profile {self.name!r}" + (f" ({'; '.join(notes)})" if notes else "")


def _spaces() -> Profile:
    data = Path(os.environ.get(SPACES_DATA_ENV) or SPACES_DATA)
    persistent = data.is_dir() and os.access(data, os.W_OK)
    runs = data / "dragonfarm_runs" if persistent else Path(tempfile.gettempdir())
    default = runs if persistent else runs / "dragonfarm_runs"
    return Profile(
        "spaces",
        "0.0.0.0",
        200,
        str(default),
        max_session_upload_mb=1000,
        max_total_upload_mb=1000,  # a new cookie starts a new session, not a new disk
        # A Space reaches the app through its proxy, under the name in SPACE_HOST (set by
        # Hugging Face).
        allowed_hosts=tuple(filter(None, [os.environ.get("SPACE_HOST")])),
        off={USER_CODE: "anyone who can open the Space could run programs in it."},
        ephemeral_runs=not persistent,
        # Each visitor's runs are theirs; build_app moves this under the runs folder it serves.
        owners_root=str(default / VISITORS_DIR),
        visitors=True,
        private_backends=False,
        max_queued_per_user=int(_env_number(MAX_QUEUED_ENV, 1, int)),
        max_runs_per_owner=int(_env_number(MAX_RUNS_ENV, 20, int)),
    )


def check_line(profile: Profile) -> str:
    """`dragonfarm check`'s line: the summary, and for the lab where it lives and who is in."""
    if profile.lab_root is None:
        return profile.summary()
    table = users.list_users(profile.users_file) if profile.users_file else []
    admins = sum(u["admin"] for u in table)
    return (
        f"{profile.summary()}; lab root {profile.lab_root}, {len(table)} users ({admins} admin) "
        f"in {profile.users_file}" + ("" if table else ": add one with `dragonfarm users add`")
    )


def _env_number(name: str, default: float, kind: type[int] | type[float]) -> float:
    text = os.environ.get(name, "").strip()
    try:
        value = kind(text) if text else default
    except ValueError:
        value = -1
    if value <= 0:
        raise ValueError(f"{name}={text!r} is not a positive number; set it to e.g. {default}.")
    return value


def lab_root_for(runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """The lab's root folder: DRAGONFARM_LAB_ROOT, else `runs_dir` (--runs-dir), else
    ./dragonfarm_lab."""
    chosen = os.environ.get(LAB_ROOT_ENV, "").strip() or runs_dir or DEFAULT_LAB_ROOT
    return Path(chosen).expanduser().resolve()


def _lab(runs_dir: str | os.PathLike[str] | None) -> Profile:
    root = lab_root_for(runs_dir)
    return Profile(
        "lab",
        "127.0.0.1",
        1024,
        str(root),
        login=True,
        lab_root=str(root),
        users_file=str(root / users.USERS_FILE),
        owners_root=str(root / USERS_DIR),
        private_backends=False,
        user_header=os.environ.get(USER_HEADER_ENV, "").strip() or None,
        max_queued_per_user=int(_env_number(MAX_QUEUED_ENV, 2, int)),
        anonymise_queue=os.environ.get(ANONYMISE_QUEUE_ENV, "").strip() in ("1", "true", "yes"),
        session_hours=_env_number(SESSION_HOURS_ENV, 12.0, float),
        # Isolation between users holds only while nobody's code runs as the server's account.
        off={
            USER_CODE: "they would run as this server's account, which can read every user's runs."
        },  # fmt: skip
    )


# The lab's folders and files are its users' only: no other local account may read them.
PRIVATE_UMASK = 0o077


def keep_private(root: Path) -> None:
    """For the lab: from now on this process and its children (trainers, the inference
    worker) make folders 0700 and files 0600, and what `root` already holds (made by an older
    version, or by `dragonfarm users add` under the admin's umask) loses its group and other
    permissions. The lab app calls this at start-up."""
    os.umask(PRIVATE_UMASK)
    for folder, subfolders, names in os.walk(root):
        for path in [folder, *(os.path.join(folder, n) for n in subfolders + names)]:
            try:
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode) and mode & PRIVATE_UMASK:
                    os.chmod(path, stat.S_IMODE(mode) & ~PRIVATE_UMASK)
            except FileNotFoundError:  # removed meanwhile (a run deleted as we walk)
                continue


def profile_names() -> list[str]:
    return ["local", "lab", "spaces"]


def get_profile(name: str | None = None, runs_dir: str | os.PathLike[str] | None = None) -> Profile:
    """The named profile, else DRAGONFARM_PROFILE's, else `local`. `runs_dir` (--runs-dir) is
    the lab's root when DRAGONFARM_LAB_ROOT is not set; the other profiles ignore it."""
    name = (name or os.environ.get(PROFILE_ENV) or "local").strip().lower()
    if name == "local":
        return Profile("local", "127.0.0.1", 1024, "dragonfarm_runs")
    if name == "spaces":
        return _spaces()  # read now: /data and SPACE_HOST are the Space's, at start-up
    if name == "lab":
        return _lab(runs_dir)
    raise ValueError(f"Unknown profile {name!r}; use one of {', '.join(profile_names())}.")


def runs_dir_for(runs_dir: str | os.PathLike[str] | None, profile: Profile) -> Path:
    """Where the app keeps runs: the lab's root in the lab profile (each user's runs are in
    a folder under it), else the argument, else DRAGONFARM_RUNS_DIR, else the profile's."""
    if profile.lab_root is not None:
        return Path(profile.lab_root)
    chosen = runs_dir or os.environ.get(RUNS_DIR_ENV) or profile.default_runs_dir
    return Path(chosen).expanduser().resolve()
