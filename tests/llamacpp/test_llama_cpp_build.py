"""The llama.cpp build (dragonfarm_core.llamacpp.build) and its background job (llama_cpp_job):
a complete cache is reused without running pip or cmake, a source that is not the pinned one is
refused, a second build of the same folder is refused while one runs (in this process or
another), scripts/build_llama_cpp.py is the same build, and the job runs the real build function
in its own process: against a complete cache it succeeds in seconds, and llama.cpp is found at
once. Nothing here compiles llama.cpp (that takes about 10 minutes: scripts/test.sh does it).
"""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest

from dragonfarm_core.llamacpp import build as llama_cpp_build
from dragonfarm_core.llamacpp import job as llama_cpp_job
from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.llamacpp.build import LlamaCppBuildError, build_llama_cpp
from dragonfarm_core.rundir import files, jobs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from llama_cpp_fakes import complete_cache, fake_llama_cpp  # noqa: E402

PIP_CANARY = "pip-index-password-canary-5521"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty dragonfarm cache root of the test's own (DRAGONFARM_CACHE), no LLAMA_CPP_DIR."""
    monkeypatch.delenv(llama_cpp.LLAMA_CPP_DIR_ENV, raising=False)
    monkeypatch.setenv(llama_cpp.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def nothing_runs(monkeypatch):
    """pip, cmake or a binary started by this process fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"ran {args[0]}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def build_script():
    spec = importlib.util.spec_from_file_location(
        "build_llama_cpp", ROOT / "scripts" / "build_llama_cpp.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_build_script_reuses_a_complete_cache(tmp_path, nothing_runs, capsys):
    cache = complete_cache(tmp_path / "llama.cpp-x")
    assert build_script().main(["--cache", str(cache)]) == 0
    assert "reused" in capsys.readouterr().out
    assert build_llama_cpp(cache) == cache.resolve()  # the package's build, the same answer


def test_the_build_refuses_a_source_that_is_not_the_pinned_one(tmp_path, capsys):
    sdist = tmp_path / f"llama_cpp_python-{llama_cpp.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"print('not llama.cpp')\n"
        info = tarfile.TarInfo("llama_cpp_python/vendor/llama.cpp/convert_hf_to_gguf.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(LlamaCppBuildError, match="not the pinned"):
        llama_cpp_build.unpack(sdist, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # The script says so on stderr and exits 1, nothing built.
    assert build_script().main(["--cache", str(tmp_path / "c"), "--sdist", str(sdist)]) == 1
    assert "not the pinned" in capsys.readouterr().err
    assert llama_cpp.read_marker(tmp_path / "c") is None


def test_a_second_build_of_a_folder_is_refused_while_one_runs(tmp_path, nothing_runs):
    dest = fake_llama_cpp(tmp_path / "llama.cpp-x")  # unpacked, not finished: it would build
    refused = pytest.raises(LlamaCppBuildError, match="being built into .* already .*pid")
    with llama_cpp_build.build_lock(dest), refused:
        build_llama_cpp(dest, force=True)
    assert (dest / llama_cpp.CONVERTER).is_file()  # the running build's folder is untouched


def test_the_build_job_reuses_a_complete_cache_in_seconds(cache, monkeypatch):
    """The Build button's job: the real build function in its own process. Against a complete
    cache it finishes at once, and llama.cpp is found without a restart."""
    complete_cache(llama_cpp.cache_dir())
    monkeypatch.setenv("PIP_INDEX_URL", f"https://user:{PIP_CANARY}@index.example/simple")
    pending = llama_cpp_job.start_build()
    assert pending.job.dir.parent == cache / files.JOBS_DIR
    assert pending.wait(60) == llama_cpp.cache_dir().resolve()
    assert pending.state == "succeeded" and any("reused" in line for line in pending.logs(20))
    assert llama_cpp_job.active_build() is None
    assert llama_cpp.find_llama_cpp().root == llama_cpp.cache_dir().resolve()
    # pip's settings reach the job on stdin only: not its argv, status or log.
    for path in pending.job.dir.rglob("*"):
        assert PIP_CANARY not in path.read_text(errors="replace"), path


def test_a_build_job_while_another_build_runs_fails_naming_it(cache):
    dest = fake_llama_cpp(llama_cpp.cache_dir())  # an interrupted build: this one would resume
    with llama_cpp_build.build_lock(dest):
        pending = llama_cpp_job.start_build()
        with pytest.raises(LlamaCppBuildError, match="being built into") as raised:
            pending.wait(60)
    assert f"pid {os.getpid()}" in str(raised.value)  # who holds the folder
    assert pending.state == "failed" and llama_cpp.read_marker(dest) is None


def test_progress_reads_the_compile_steps_of_the_log(cache):
    cache.mkdir(parents=True)
    job_dir = files.new_job_dir(llama_cpp.cache_root(), llama_cpp_job.JOB_KIND)
    pending = llama_cpp_job.BuildJob(jobs.open_job(job_dir))
    assert pending.progress() is None
    pending.job.log.write_text(
        "[build_llama_cpp] configuring: cmake ...\n[39/216] Building CXX object a.o\n"
        "[40/216] Building CXX object src/llama.cpp.o\n"
    )
    assert pending.progress() == (40, 216)
    pending.job.log.write_text("[ 57%] Building CXX object ggml.o\n")
    assert pending.progress() == (57, 100)


def test_an_interrupted_step_takes_what_it_started_with_it(tmp_path):
    """A cancel interrupts the build while cmake runs: the compilers cmake started go too, or
    they would race the next build in the same folder."""
    marker = tmp_path / "grandchild.pid"

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            llama_cpp_build.run_step(["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    grandchild, end = int(marker.read_text()), time.monotonic() + 10
    while time.monotonic() < end:
        try:
            if psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the step's child {grandchild} outlived the interrupted build")
    with pytest.raises(subprocess.CalledProcessError):
        llama_cpp_build.run_step(["sh", "-c", "exit 3"])
