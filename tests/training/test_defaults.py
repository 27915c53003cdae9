"""The training functions' defaults are the method args' own (method_args.py) and the spec's:
a number written twice drifts, and then train()/prefer()/reinforce() and the Train tab differ."""

from __future__ import annotations

import dataclasses
import inspect

import dragonfarm_core as dragon
from dragonfarm_core.method_args import DpoArgs, ReinforceArgs


def _defaults(function) -> dict:
    return {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_prefer_and_reinforce_default_to_their_method_args():
    prefer, reinforce = _defaults(dragon.prefer), _defaults(dragon.reinforce)
    for f in dataclasses.fields(DpoArgs):
        assert prefer[f.name] == f.default, f.name
    for f in dataclasses.fields(ReinforceArgs):
        if f.name in reinforce:
            assert reinforce[f.name] == f.default, f.name
    assert _defaults(dragon.test_rewards)["max_new_tokens"] == ReinforceArgs.max_new_tokens


def test_every_training_function_keeps_the_specs_sample_count():
    n = dragon.RunSpec.n_samples
    for function in (dragon.train, dragon.prefer, dragon.reinforce):
        assert _defaults(function)["n_samples"] == n, function.__name__
