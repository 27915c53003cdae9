"""The trainer's thread policy (trainers/threads.py): the idle cores of its affinity mask, at
least one, sleeping OpenMP waits; what the user set wins. Its effect: bench/threads_under_load.py."""

from __future__ import annotations

import pytest

from dragonfarm_core.trainers import threads


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
