"""The environment of every child process the package starts: an allow-list, never the caller's.

The trainer, the evaluator and every other job (`jobs.start`), the inference worker, the
reward-command helper and the reward commands all get `child_env()`: what Python, torch, the
Hugging Face libraries and a run need. The app downloads models itself
(`models.resolve_model`, with the caller's HF_TOKEN) and a run's config names the local folder,
so no child needs a token. `hide_environ()` blanks the rest from this process's
/proc/<pid>/environ, for the processes that can read it (see its docstring). Pure standard
library: the trainer and the reward helper import it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

# What a child process may receive. An allow-list, because a list of secret-looking name
# fragments always misses one (DATABASE_URI, MY_SERVICE_PAT): whatever is not named here stays
# in the caller (HF_TOKEN, AWS_*, OPENAI_API_KEY, the server's API key...).
PASS_NAMES = frozenset(
    {
        # the process and its locale
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
        "TMPDIR", "TEMP", "TMP",
        # Python and the environment it runs in
        "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONWARNINGS",
        "PYTHONFAULTHANDLER", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX",
        "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH",
        "COVERAGE_PROCESS_START",
        # compilers that torch.compile / triton may call
        "CC", "CXX", "CPATH", "LIBRARY_PATH",
        # TLS trust, and the proxy exceptions (proxies: PROXY_NAMES)
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "NO_PROXY", "no_proxy",
        # devices and threads beyond the prefixes below
        "GPU_DEVICE_ORDINAL", "VECLIB_MAXIMUM_THREADS", "TOKENIZERS_PARALLELISM",
        # Hugging Face: cache folders, endpoint and offline switches; never a token
        "HF_HOME", "HF_ENDPOINT", "HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE", "HF_MODULES_CACHE",
        "HF_ASSETS_CACHE", "HUGGINGFACE_HUB_CACHE", "HUGGINGFACE_ASSETS_CACHE",
        "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY",
    }
)  # fmt: skip
# Families of settings, each passed unless its name looks like a secret (SECRET_WORDS):
# DRAGONFARM_BACKEND passes, DRAGONFARM_BACKEND_API_KEY does not.
PASS_PREFIXES = (
    "LC_", "XDG_", "DRAGONFARM_", "HF_HUB_", "HF_XET_",
    "CUDA_", "NVIDIA_", "HIP_", "HSA_", "ROCM_", "ROCR_", "PYTORCH_", "TORCH", "TRITON_", "NCCL_",
    "BNB_", "ACCELERATE_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "NUMEXPR_",
)  # fmt: skip
SECRET_WORDS = (
    "TOKEN", "KEY", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE",
    "_PAT", "SIGNATURE",
)  # fmt: skip
# Extra names (comma-separated; NAME_* for a family) the user wants children to receive. Reward
# commands receive them too, so never list a secret here.
PASS_ENV_VAR = "DRAGONFARM_PASS_ENV"
# Passed unless the URL carries a user or password (a secret like any other).
PROXY_NAMES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}
)


def _extra_names(environ: Mapping[str, str]) -> list[str]:
    raw = environ.get(PASS_ENV_VAR, "")
    return [p for p in raw.replace(",", " ").split() if p]


def passes(name: str, value: str, extra: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether a child process receives this variable (see PASS_NAMES and PASS_PREFIXES).

    >>> passes("CUDA_VISIBLE_DEVICES", "0"), passes("HF_TOKEN", "hf_x"), passes("DATABASE_URI", "")
    (True, False, False)
    >>> passes("DRAGONFARM_MAX_CONCURRENT", "2"), passes("DRAGONFARM_BACKEND_API_KEY", "sk")
    (True, False)
    """
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in extra):
        return True
    if name in PROXY_NAMES:
        try:
            parts = urlsplit(value if "//" in value else f"//{value}")
            return parts.username is None and parts.password is None
        except ValueError:
            return False
    if name in PASS_NAMES:
        return True
    upper = name.upper()
    return upper.startswith(PASS_PREFIXES) and not any(w in upper for w in SECRET_WORDS)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: the allow-listed part of `environ` (default: this
    process's), with this package importable and output unbuffered.

    The one place that decides what a child sees: the trainer, the evaluator, the inference
    worker, the reward-command helper and the reward commands all get this.

    >>> env = child_env({"PATH": "/bin", "HF_TOKEN": "hf_x", "MY_SERVICE_PAT": "p", "X": "1"})
    >>> sorted(env)
    ['PATH', 'PYTHONPATH', 'PYTHONUNBUFFERED']
    """
    environ = os.environ if environ is None else environ
    extra = _extra_names(environ)
    env = {k: v for k, v in environ.items() if passes(k, v, extra)}
    package_parent = str(Path(__file__).resolve().parents[2])
    paths = [p for p in (environ.get("PYTHONPATH") or "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([package_parent, *paths]))
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach train.log as they are printed
    return env


def hide_environ() -> bool:
    """Blank, in this process's /proc/<pid>/environ, every variable `child_env` would not pass.

    /proc/<pid>/environ shows the memory that held the environment at exec, whatever os.environ
    says since; any process of the same user can read it, and a reward command can when this
    process is its reaper (the app as PID 1 in a container, where orphans land). The strings
    there are overwritten in place, and each variable is set again from os.environ, so this
    process and what it starts see the same values as before (they now live on the heap, which
    /proc does not show). Linux only (False elsewhere, or when the area cannot be checked).
    """
    global _environ_hidden
    if not sys.platform.startswith("linux"):
        return False
    with _hide_lock:
        if not _environ_hidden:  # the area is fixed at exec: once is enough
            _environ_hidden = _hide_environ()
        return _environ_hidden


_hide_lock = threading.Lock()
_environ_hidden = False


def _hide_environ() -> bool:
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (man 5 proc)
        shown = Path("/proc/self/environ").read_bytes()
        # Write only where the kernel says the environment is, and only if it holds what
        # /proc shows: anything else and this does nothing.
        if not start or end <= start or ctypes.string_at(start, end - start) != shown:
            return False
    except (OSError, ValueError, IndexError):
        return False
    extra = _extra_names(os.environ)
    offset, hidden = 0, set()
    for entry in shown.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        size = len(entry)
        if sep and size > 2 and not passes(os.fsdecode(name), os.fsdecode(value), extra):
            # A name of underscores, one per length, so the C-level entry can be unset by name.
            blank = b"_" * (size - 1) + b"="
            ctypes.memmove(start + offset, blank, size)
            hidden.add((os.fsdecode(name), os.fsdecode(blank[:-1])))
        offset += size + 1
    for var, blank_var in hidden:
        with contextlib.suppress(OSError, ValueError):
            os.unsetenv(blank_var)
            if var in os.environ:  # not unset since start: give C code its value back
                os.putenv(var, os.environ[var])
    return True
