"""dragon.evaluate(): reading what training wrote, metrics stored in the run, refusals, and
recomputing in a subprocess (its failure and timeout paths, and, slow, a real SFT run)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dragonfarm_core.evaluation.evaluate import Evaluation, evaluate, metric_name, named_metrics
from dragonfarm_core.rewards.task_metrics import metric_regex
from dragonfarm_core.rundir import files

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"


def finished_run(root: Path, method: str = "sft", n_eval: int = 3, state: str = "succeeded",
                 results: dict | None = None, n_samples: int = 3) -> Path:  # fmt: skip
    """A run directory as a trainer leaves it: config, status, eval.json, samples.json."""
    run_dir = root / f"{method}-run"
    files.write_config(run_dir, {
        "schema": 1, "id": run_dir.name, "name": run_dir.name, "method": method,
        "model": {"name": "m", "base": "/nowhere", "adapters": []}, "continued_from": None,
        "dataset": {}, "data": {"kind": "messages", "n_train": 20, "n_eval": n_eval},
        "lora": {}, "args": {}, "hardware": {"device": "cpu"}, "n_samples": n_samples,
        "method_args": {},
    })  # fmt: skip
    files.write_status(run_dir, {"state": state, "step": 8})
    if results is not None:
        files.write_eval(run_dir, results)
    samples = [
        {"prompt": f"q{i}", "reference": f"Hi Ann,\n\nanswer {i}", "generated": g, "split": "eval"}
        for i, g in enumerate(["Hi Ann,\n\nanswer 0", "answer 1", "Hi Bo, answer 2 extra"])
    ]
    if method in ("dpo", "orpo"):
        samples = [{**s, "rejected": f"meh {i}"} for i, s in enumerate(samples)]
    files.write_samples(run_dir, samples[:n_samples])
    return run_dir


SFT_RESULTS = {"eval_loss": 1.5, "perplexity": math.exp(1.5), "eval_tokens": 120,
               "eval_rows": 4, "step": 8}  # fmt: skip


def test_reads_what_training_wrote(tmp_path):
    run_dir = finished_run(tmp_path, results=SFT_RESULTS)
    ev = evaluate(run_dir, n_samples=2)
    assert isinstance(ev, Evaluation) and not ev.recomputed
    assert ev.eval_loss == 1.5 and ev["perplexity"] == pytest.approx(math.exp(1.5))
    assert ev.eval_tokens == 120 and ev.get("pref_accuracy") is None
    assert list(ev.samples.columns[:3]) == ["prompt", "reference", "generated"]
    assert ev.samples["prompt"].tolist() == ["q0", "q1"]
    assert ev.metrics == {} and not (run_dir / files.METRICS).exists()
    assert "eval_loss=1.5" in repr(ev) and ev.to_dict()["samples"][0]["prompt"] == "q0"
    with pytest.raises(AttributeError, match="no 'pref_accuracy'; it holds eval_loss"):
        _ = ev.pref_accuracy


def test_preference_runs_carry_the_rejected_reply(tmp_path):
    results = {"eval_loss": 0.4, "pref_accuracy": 0.75, "reward_margin": 1.2, "eval_pairs": 4}
    ev = evaluate(finished_run(tmp_path, method="dpo", results=results))
    assert ev.pref_accuracy == 0.75 and ev.reward_margin == 1.2 and ev.eval_pairs == 4
    assert list(ev.samples.columns[:4]) == ["prompt", "reference", "generated", "rejected"]
    assert ev.samples["rejected"].tolist() == ["meh 0", "meh 1", "meh 2"]


def test_metrics_are_scored_on_the_samples_and_stored_in_the_run(tmp_path):
    run_dir = finished_run(tmp_path, results=SFT_RESULTS)
    style = metric_regex(r"^Hi \w+,\n\n")

    def shout(generated: str, reference: str, prompt: str) -> float:
        return float(generated.isupper())

    ev = evaluate(run_dir, metrics=["exact", style, shout])
    assert ev.metrics == {"exact": pytest.approx(1 / 3), "regex:^Hi \\w+,\\n\\n": pytest.approx(1 / 3),
                          "shout": 0.0}  # fmt: skip
    stored = files.read_json(run_dir / files.METRICS)
    assert stored["exact"]["values"] == [1.0, 0.0, 0.0] and stored["exact"]["n"] == 3
    assert stored["regex:^Hi \\w+,\\n\\n"]["mean"] == pytest.approx(1 / 3)

    again = evaluate(run_dir, metrics={"ratio": "length_ratio"})  # merged with what is stored
    assert set(files.read_json(run_dir / files.METRICS)) == {"exact", style_name(style), "shout",
                                                             "ratio"}  # fmt: skip
    assert set(again.metrics) == {"ratio"}
    assert set(evaluate(run_dir).metrics) == {"exact", style_name(style), "shout", "ratio"}


def style_name(metric) -> str:
    return metric_name(metric)


def test_metric_names_and_refusals():
    assert metric_name(metric_regex("^T-\\d+")) == "regex:^T-\\d+"
    assert list(named_metrics(["exact", "exact", metric_regex("x")])) == [
        "exact", "exact_2", "regex:x"
    ]  # fmt: skip
    assert list(named_metrics("token_f1")) == ["token_f1"]
    with pytest.raises(ValueError, match="Unknown metric 'bleu'"):
        named_metrics(["bleu"])


def test_length_ratio_mean_skips_rows_without_a_reference(tmp_path):
    run_dir = finished_run(tmp_path, results=SFT_RESULTS)
    samples = files.read_samples(run_dir)
    samples[1]["reference"] = ""
    files.write_samples(run_dir, samples)
    ev = evaluate(run_dir, metrics=["length_ratio"])
    stored = files.read_json(run_dir / files.METRICS)["length_ratio"]
    assert stored["values"][1] is None  # NaN is written as null
    first, third = stored["values"][0], stored["values"][2]
    assert ev.metrics["length_ratio"] == pytest.approx((first + third) / 2)


def test_grpo_runs_are_read_as_their_trainer_wrote_them(tmp_path):
    results = {"reward": 0.6, "reward_numeric": 0.5, "eval_prompts": 4}
    ev = evaluate(finished_run(tmp_path, method="grpo", results=results))
    assert ev.reward == 0.6 and ev.reward_numeric == 0.5
    with pytest.raises(RuntimeError, match="only sft, dpo, orpo runs can be evaluated again"):
        evaluate(tmp_path / "grpo-run", recompute=True)


def test_refusals_name_the_run_and_what_to_do(tmp_path):
    running = finished_run(tmp_path / "a", state="running", results=SFT_RESULTS)
    files.update_status(running, pid=os.getpid())
    with pytest.raises(RuntimeError, match="still running; evaluate it once it has finished"):
        evaluate(running)
    cancelled = finished_run(tmp_path / "b", state="cancelled")  # no eval.json, no adapter
    with pytest.raises(RuntimeError, match="has no saved adapter and no complete evaluation"):
        evaluate(cancelled)
    with pytest.raises(ValueError, match="n_samples must be a whole number"):
        evaluate(finished_run(tmp_path / "c", results=SFT_RESULTS), n_samples=-1)


@pytest.mark.slow
def test_a_failed_recompute_raises_with_the_log_tail(tmp_path):
    run_dir = finished_run(tmp_path, results=SFT_RESULTS)
    files.adapter_dir(run_dir).mkdir()  # an adapter folder with nothing in it
    with pytest.raises(
        RuntimeError, match=r"(?s)failed \(error\): ModelLoadError: .*holds no saved adapter"
    ):
        evaluate(run_dir, recompute=True)
    assert files.read_eval(run_dir) == SFT_RESULTS  # left as it was


def test_a_recompute_past_its_timeout_is_stopped(tmp_path):
    run_dir = finished_run(tmp_path, results=SFT_RESULTS)
    files.adapter_dir(run_dir).mkdir()
    with pytest.raises(TimeoutError, match="took longer than 0.2 s and was stopped"):
        evaluate(run_dir, recompute=True, timeout=0.2)
    assert "evaluate:" in "\n".join(files.read_log_tail(run_dir, 5))


@pytest.mark.slow
def test_recompute_matches_training_and_generates_more_samples(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "trainers"))
    from trainer_fixtures import build_tiny_model, support_conversations

    from dragonfarm_core.trainers import sft

    model = BUNDLED if (BUNDLED / "config.json").is_file() else build_tiny_model(tmp_path / "m")
    run_dir = tmp_path / "run"
    rows = support_conversations(30, seed=5)
    files.write_jsonl(files.data_path(run_dir, "train"), rows[:22])
    files.write_jsonl(files.data_path(run_dir, "eval"), rows[22:])
    files.write_config(run_dir, {
        "schema": 1, "id": "run", "name": "run", "method": "sft", "continued_from": None,
        "model": {"name": "m", "base": str(model), "adapters": []}, "dataset": {},
        "data": {"kind": "messages", "n_train": 22, "n_eval": 8},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "args": {"max_steps": 2, "batch_size": 4, "grad_accum": 1, "max_seq_len": 128,
                 "extra": {"sample_max_new_tokens": 8}},
        "hardware": {"device": "cpu", "dtype": "float32"}, "n_samples": 2, "method_args": {},
    })  # fmt: skip
    files.write_status(run_dir, {"state": "queued"})
    assert sft.main(run_dir) == "succeeded"
    trained = files.read_eval(run_dir)

    ev = evaluate(run_dir, n_samples=100, metrics=["token_f1"])  # more than written: up to 8
    assert ev.recomputed and len(ev.samples) == 8 and len(files.read_samples(run_dir)) == 8
    assert ev.eval_loss == pytest.approx(trained["eval_loss"], rel=1e-4)
    assert ev.eval_tokens == trained["eval_tokens"] and ev.step == 2
    assert files.read_json(run_dir / files.METRICS)["token_f1"]["n"] == 8
    assert evaluate(run_dir, n_samples=3).recomputed is False
    assert sys.modules.get("torch") is not None  # (sft.main ran here; evaluate used a child)


def test_an_evaluation_is_a_full_read_only_mapping(tmp_path):
    from collections.abc import Mapping

    import pandas as pd

    from dragonfarm_core.evaluation.evaluate import Evaluation

    ev = Evaluation(
        "r1", "dpo", {"pref_accuracy": 0.9, "eval_pairs": 4}, pd.DataFrame(), {"f1": 0.5}
    )
    assert isinstance(ev, Mapping)
    assert "pref_accuracy" in ev and "perplexity" not in ev and "samples" in ev
    assert list(ev) == ["pref_accuracy", "eval_pairs", "samples", "metrics"] and len(ev) == 4
    assert dict(ev)["metrics"] == {"f1": 0.5} and ev.get("perplexity") is None
    assert ev.pref_accuracy == 0.9 == ev["pref_accuracy"] and ev == ev


@pytest.mark.slow
def test_a_backtracking_regex_metric_is_refused_without_freezing_the_process(tmp_path):
    """Run where it would hang if the search ran in the process (re holds the GIL): a child
    Python under a deadline, whose other thread must keep running meanwhile."""
    run_dir = finished_run(tmp_path, results=SFT_RESULTS, n_samples=1)
    files.write_samples(run_dir, [{"prompt": "q", "reference": "r", "generated": "a" * 40,
                                   "split": "eval"}])  # fmt: skip
    probe = (
        "import sys, threading, time\n"
        "import dragonfarm_core as dragon\n"
        "ticks = []\n"
        "def tick():\n"
        "    while len(ticks) < 5: ticks.append(time.monotonic()); time.sleep(0.1)\n"
        "threading.Thread(target=tick, daemon=True).start()\n"
        "try:\n"
        "    dragon.evaluate(sys.argv[1], 1, metrics=[dragon.metric_regex(r'(.+)+\\x00')])\n"
        "except ValueError as e:\n"
        "    print(len(ticks), e)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", probe, str(run_dir)], cwd=ROOT,
                              capture_output=True, text=True, timeout=240)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("a backtracking regex metric froze its process for 240 s")
    ticks, _, message = done.stdout.strip().partition(" ")
    assert int(ticks) == 5, done.stderr[-2000:]  # the other thread ran during the search
    assert message.startswith("Metric 'regex:(.+)+") and "gave up after 1 s on row 0" in message
