"""GRPO's log-probabilities with each distinct prompt read once (grpo_rollout.
shared_prompt_logps, used by grpo.trainer_class) against TRL's own GRPOTrainer method, which
sends every row through the model whole: the same log-probabilities and entropies, the same
gradients, on the bundled model with a LoRA adapter (on and off), left-padded prompts of
different lengths and right-padded completions; and the cases it leaves to TRL.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from dragonfarm_core.models import bundled_model_path
from dragonfarm_core.rundir.train_config import ModelSpec
from dragonfarm_core.settings import Lora
from dragonfarm_core.trainers import grpo, modeling
from dragonfarm_core.trainers import grpo_rollout as rl
from dragonfarm_core.trainers.placement import Placement

GROUP, COMPLETION = 4, 12


def lora_model(dropout: float):
    """The bundled model with TRL's fused head (as GRPOTrainer adds it) and a LoRA adapter
    whose B is not zero, so that "adapter off" and dropout change the numbers."""
    spec = ModelSpec(name="bundled", base=str(bundled_model_path()))
    base = modeling.load_model(spec, Placement(torch.device("cpu"), torch.float32), False)
    add_fused_lm_head(base, outputs=("log_probs", "entropy"))
    model = modeling.add_lora(base, Lora(r=8, dropout=dropout), 0, False, False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    return model.train()


@pytest.fixture(scope="module")
def model():
    return lora_model(0.0)


def rows() -> tuple[torch.Tensor, torch.Tensor]:
    """3 prompts (9, 4 and 14 tokens, left-padded) x GROUP completions (right-padded), in
    TRL's layout: prompt columns, then COMPLETION completion columns."""
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(10, 4000, (n,), generator=gen).tolist() for n in (9, 4, 14)]
    prompt_ids, prompt_mask = rl.left_pad([p for p in prompts for _ in range(GROUP)], 3)
    n = len(prompt_ids)
    lengths = torch.randint(1, COMPLETION + 1, (n,), generator=gen)
    completion_mask = (torch.arange(COMPLETION)[None] < lengths[:, None]).long()
    completions = torch.randint(10, 4000, (n, COMPLETION), generator=gen)
    completions = completions.masked_fill(completion_mask == 0, 3)
    return torch.cat([prompt_ids, completions], 1), torch.cat([prompt_mask, completion_mask], 1)


def trl_scores(model, ids, mask, completion=COMPLETION):
    """TRL's GRPOTrainer._get_per_token_logps_and_entropies itself (it needs only autocast
    from the trainer)."""
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(autocast=contextlib.nullcontext, is_main_process=True)
    )
    logps, entropies, _ = GRPOTrainer._get_per_token_logps_and_entropies(
        trainer, model, ids, mask, completion, compute_entropy=True
    )
    return logps, entropies


def with_grads(model, score):
    model.zero_grad()
    logps, entropies = score()
    (logps * torch.linspace(-1, 1, logps.shape[1])).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach(), entropies.detach(), grads


def test_shared_prompts_score_what_trl_scores_with_the_same_gradients(model):
    ids, mask = rows()
    theirs = with_grads(model, lambda: trl_scores(model, ids, mask))
    read = []
    hook = model.get_base_model().model.register_forward_pre_hook(
        lambda _m, _a, kw: read.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        ours = with_grads(model, lambda: rl.shared_prompt_logps(model, ids, mask, COMPLETION))
    finally:
        hook.remove()
    prompt_len = ids.shape[1] - COMPLETION
    # each distinct prompt but its last token once, then every row from that token on
    assert read == [(3, prompt_len - 1), (3 * GROUP, COMPLETION + 1)]
    assert ours[0].shape == theirs[0].shape == (3 * GROUP, COMPLETION)
    torch.testing.assert_close(ours[0], theirs[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=1e-5)
    assert (ours[0][mask[:, prompt_len:] == 0] == 0).all()  # padding scores 0, as TRL's
    assert theirs[2].keys() == ours[2].keys() and len(ours[2]) > 0
    for name, grad in theirs[2].items():  # the same sums, added up in another order
        assert grad.abs().max() > 0
        assert (ours[2][name] - grad).norm() <= 1e-5 * grad.norm(), name


def test_the_reference_with_the_adapter_off_is_scored_the_same(model):
    ids, mask = rows()
    with torch.no_grad(), model.disable_adapter():
        theirs = trl_scores(model, ids, mask)
        ours = rl.shared_prompt_logps(model, ids, mask, COMPLETION)
    with torch.no_grad():
        adapted = rl.shared_prompt_logps(model, ids, mask, COMPLETION)
    torch.testing.assert_close(ours[0], theirs[0], rtol=0, atol=1e-5)
    assert not torch.allclose(adapted[0], ours[0])  # the adapter was really off


def test_trainer_class_takes_the_shared_path_and_falls_back_to_trl(model, monkeypatch):
    ids, mask = rows()
    cls = grpo.trainer_class()
    assert issubclass(cls, GRPOTrainer)
    trainer = cls.__new__(cls)  # the method reads only the accelerator
    trainer.accelerator = SimpleNamespace(
        autocast=contextlib.nullcontext, num_processes=1, is_main_process=True
    )
    shared = rl.shared_prompt_logps
    calls = []

    def spy(*args):
        calls.append(len(args[1]))
        return shared(*args)

    monkeypatch.setattr(rl, "shared_prompt_logps", spy)
    with torch.no_grad():
        expected, entropies = trl_scores(model, ids, mask)
        logps, got_entropies, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, mask, COMPLETION, batch_size=5, compute_entropy=True
        )
    assert calls == [5, 5, 2]  # in TRL's chunks of batch_size rows
    torch.testing.assert_close(logps, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_entropies, entropies, rtol=0, atol=1e-5)

    monkeypatch.setattr(rl, "shared_prompt_logps", lambda *args: calls.append("no") or None)
    with torch.no_grad():  # declined: TRL's own forward answers
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, COMPLETION)
    assert calls[-1] == "no"
    torch.testing.assert_close(logps, expected, rtol=0, atol=1e-5)
    trainer.accelerator.num_processes = 2
    with torch.no_grad():  # several processes: not asked
        trainer._get_per_token_logps_and_entropies(model, ids, mask, COMPLETION)
    assert calls.count("no") == 1


def test_activation_checkpointing_or_a_one_token_prompt_is_left_to_trl(model):
    ids, mask = rows()
    one = torch.cat([torch.full((len(ids), 1), 7), ids[:, -COMPLETION:]], 1)
    one_mask = torch.cat([torch.ones(len(ids), 1, dtype=torch.long), mask[:, -COMPLETION:]], 1)
    assert rl.shared_prompt_logps(model, one, one_mask, COMPLETION) is None
    inner = model.get_base_model()
    inner.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    try:
        assert rl.shared_prompt_logps(model, ids, mask, COMPLETION) is None
        with torch.no_grad():  # no backward to replay: the cache is kept
            assert rl.shared_prompt_logps(model, ids, mask, COMPLETION) is not None
    finally:
        inner.activation_checkpointing_disable()


def test_with_dropout_on_every_row_reads_its_own_prompt(model):
    """TRL draws each row's prompt its own dropout; a group's prompt read once would share one
    draw. So with LoRA dropout on (training mode) every row's prompt goes through the model
    (the head still only where completion tokens are scored); with the adapter off (the
    reference) or in eval mode nothing is dropped and each distinct prompt is read once."""
    ids, mask = rows()
    prompt_len = ids.shape[1] - COMPLETION
    dropping = lora_model(0.05)
    read = []
    hook = dropping.get_base_model().model.register_forward_pre_hook(
        lambda _m, _a, kw: read.append(len(kw["input_ids"])), with_kwargs=True
    )
    try:
        assert rl.drops_out(dropping.get_base_model())
        with torch.no_grad():
            dropped = rl.shared_prompt_logps(dropping, ids, mask, COMPLETION)
            assert read == [3 * GROUP, 3 * GROUP]  # every row's prompt, then every row
            with dropping.disable_adapter():
                assert not rl.drops_out(dropping.get_base_model())
                reference = rl.shared_prompt_logps(dropping, ids, mask, COMPLETION)
                expected, _ = trl_scores(dropping, ids, mask)
            assert read[2:4] == [3, 3 * GROUP]  # each distinct prompt once
            dropping.eval()
            evaluated = rl.shared_prompt_logps(dropping, ids, mask, COMPLETION)
            assert read[-2:] == [3, 3 * GROUP]
            expected_eval, _ = trl_scores(dropping, ids, mask)
    finally:
        hook.remove()
    assert dropped[0].shape == (3 * GROUP, COMPLETION)
    assert (dropped[0][mask[:, prompt_len:] == 0] == 0).all()
    torch.testing.assert_close(reference[0], expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(evaluated[0], expected_eval, rtol=0, atol=1e-5)
    assert not torch.equal(dropped[0], evaluated[0])  # training mode really dropped
    inner = model.get_base_model()
    assert not rl.drops_out(inner)  # the fixture's adapter has dropout 0
    inner.config.attention_dropout = 0.1  # (Llama's is 0)
    try:
        assert rl.drops_out(inner)
    finally:
        inner.config.attention_dropout = 0.0
