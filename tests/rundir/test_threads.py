"""The trainer's thread policy (rundir/threads.py): the idle cores of its affinity mask, at
least one, sleeping OpenMP waits; what the user set wins. Its effect: bench/threads_under_load.py."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from dragonfarm_core.rundir import threads


@pytest.mark.parametrize(("busy_percent", "expected"), [(0.0, 2), (40.0, 1), (100.0, 1)])
def test_it_trains_on_the_cores_nobody_else_is_busy_on(monkeypatch, busy_percent, expected):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads.psutil, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.psutil, "cpu_percent", lambda interval: busy_percent)
    assert threads.choose_threads({}) == expected


def test_only_the_cores_of_its_affinity_mask_count(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)  # e.g. taskset -c 0-3 on 16 cores
    monkeypatch.setattr(threads.psutil, "cpu_count", lambda: 16)
    monkeypatch.setattr(threads.psutil, "cpu_percent", lambda interval: 0.0)
    assert threads.choose_threads({}) == 4


def test_what_the_user_set_wins():
    assert threads.choose_threads({"OMP_NUM_THREADS": "3"}) is None
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    threads.before_torch(env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}
    env = {}
    threads.before_torch(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_the_real_mask_and_sample_give_a_usable_count():
    cores = threads.usable_cores()
    chosen = threads.choose_threads({})
    assert cores >= 1 and chosen is not None and 1 <= chosen <= cores


@pytest.mark.slow
def test_the_other_load_counts_other_processes_not_this_one():
    """What the worker's chat decode reads (OtherLoad): this process's own busy core is left
    out, another process's counts."""
    me, load = psutil.Process(), threads.OtherLoad()
    psutil.cpu_percent(interval=None)
    me.cpu_percent(interval=None)
    end = time.monotonic() + 0.8
    while time.monotonic() < end:
        pass
    load.sample(me)
    mine = load.busy
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.5)  # the interpreter's start-up, then 0.8 s of the loop at least
        psutil.cpu_percent(interval=None)
        me.cpu_percent(interval=None)
        time.sleep(0.8)
        load.sample(me)
    finally:
        hog.kill()
        hog.wait()
    assert mine < 0.7 < load.busy and load.samples == 2


def test_the_other_load_is_sampled_in_the_background():
    load = threads.OtherLoad(every_s=0.05).start()
    end = time.monotonic() + 5
    while load.samples < 2 and time.monotonic() < end:
        time.sleep(0.05)
    assert load.samples >= 2 and load.busy >= 0.0
    assert load.thread is not None and load.thread.daemon
    assert 1 <= load.free_threads(2) <= 2
