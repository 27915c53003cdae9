"""The Dockerfile that builds the Space image, against the Spaces Docker SDK's requirements: the
app on port 7860 bound to 0.0.0.0, run as the non-root user with uid 1000 whose home is writable,
the spaces profile set, the bundled model and example data in the build context, torch from a
build argument at the pinned version, a healthcheck, and no secret baked in.

With a container engine that answers (`docker info`), the image is also built and run until its
healthcheck passes; without one (this machine has the docker client but no daemon) that test is
skipped and the instruction checks are what holds.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def args_of(word: str) -> list[str]:
    return [rest for w, rest in instructions() if w == word]


def env() -> dict[str, str]:
    values: dict[str, str] = {}
    for rest in args_of("ENV"):
        for pair in shlex.split(rest):
            key, _, value = pair.partition("=")
            values[key] = value
    return values


def test_it_runs_the_app_on_port_7860_on_all_interfaces_as_uid_1000():
    words = [w for w, _ in instructions()]
    assert words[0] == "FROM" and args_of("FROM") == ["python:3.11-slim"]
    assert any(re.search(r"useradd .*-u 1000 user\b", r) for r in args_of("RUN"))
    # Everything from the first USER on (installs, the build, the app) runs as that user.
    assert args_of("USER") == ["user"]
    first_user = words.index("USER")
    assert words.index("CMD") > first_user and words.index("COPY") > first_user
    assert all("--chown=user" in c for c in args_of("COPY"))
    assert args_of("EXPOSE") == ["7860"]
    assert json.loads(args_of("CMD")[0]) == ["python", "app.py", "--host", "0.0.0.0", "--port",
                                            "7860"]  # fmt: skip
    assert env()["HOME"] == "/home/user" and args_of("WORKDIR") == ["/home/user/app"]
    assert env()["DRAGONFARM_PROFILE"] == "spaces"


def test_torch_comes_at_the_pinned_version_from_a_build_argument():
    pinned = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned, "requirements.txt pins torch"
    assert 'TORCH_INDEX_URL=""' in args_of("ARG")
    install = next(r for r in args_of("RUN") if "TORCH_INDEX_URL" in r)
    assert f"torch=={pinned.group(1)}" in install and '--index-url "$TORCH_INDEX_URL"' in install


def test_it_has_a_healthcheck_on_the_apps_own_port():
    (check,) = args_of("HEALTHCHECK")
    assert "CMD" in check and "http://127.0.0.1:7860/" in check


def test_no_secret_is_baked_into_the_image():
    names = [*env(), *(a.split("=")[0] for a in args_of("ARG"))]
    assert not [n for n in names if re.search(r"TOKEN|KEY|SECRET|PASSWORD", n)]


def test_the_build_context_holds_the_model_and_example_data_and_no_runs():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(
            fnmatch.fnmatch(p, pat.removeprefix("**/")) for p in prefixes for pat in patterns
        )

    needed = ["app.py", "pyproject.toml", "requirements.txt", "scripts/build_llama_cpp.py",
              "assets/example_tickets.csv", "assets/models/tiny-support/model.safetensors",
              "assets/models/tiny-support/tokenizer.json", "dragonfarm_core/cli/commands.py",
              "ui/layout.py"]  # fmt: skip
    for path in needed:
        assert (ROOT / path).is_file(), path
        assert not ignored(path), f"{path} would be left out of the image"
    for path in [".git/config", "dragonfarm_runs/x/status.json", "tests/conftest.py"]:
        assert ignored(path), f"{path} would be copied into the image"


def _engine() -> str | None:
    tool = shutil.which("docker") or shutil.which("podman")
    if tool and subprocess.run([tool, "info"], capture_output=True, timeout=30).returncode == 0:
        return tool
    return None


@pytest.mark.slow
@pytest.mark.skipif(_engine() is None, reason="no container engine answers here (docker info)")
def test_the_image_builds_and_passes_its_healthcheck():
    tool = _engine()
    assert tool
    tag = "dragonfarm-space-test"
    build = [tool, "build", "--build-arg", "LLAMA_CPP=0", "-t", tag, str(ROOT)]
    subprocess.run(build, check=True, timeout=3600)
    started = subprocess.run([tool, "run", "-d", "-P", tag], capture_output=True, text=True,
                             check=True)  # fmt: skip
    container = started.stdout.strip()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            health = subprocess.run(
                [tool, "inspect", "-f", "{{.State.Health.Status}}", container],
                capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip
            if health in ("healthy", "unhealthy"):
                break
            time.sleep(5)
        assert health == "healthy"
        user = subprocess.run([tool, "exec", container, "id", "-u"], capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
        assert user == "1000"
    finally:
        subprocess.run([tool, "rm", "-f", container], capture_output=True)
