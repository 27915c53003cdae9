"""synthesize and synthesize_pairs: the quality pass (every drop reason), the judge gate, teachers
through the official clients against local servers, pairs in judge and teacher mode, and the
written file as the dataset's source that `code(run)` points at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.batches import synthesis as synthesis_jobs
from dragonfarm_core.codegen.run import code
from dragonfarm_core.data.neardup import repeats
from dragonfarm_core.llm import Reply
from dragonfarm_core.rundir import files, launch
from dragonfarm_core.synthesis import asking as synthesis_asking
from dragonfarm_core.synthesis import files as synthesis_files
from dragonfarm_core.synthesis import synthesize as synthesis
from dragonfarm_core.synthesis.quality import garbled
from tests.llm.llm_fakes import FakeAnthropic, FakeOpenAI, isolated_runs_dir

CANARY = "sk-ant-canary-synth-7d1e-do-not-write"


@pytest.fixture(autouse=True)
def runs(tmp_path, monkeypatch) -> Path:
    """The runs dir (and so the response cache and synthetic/) in tmp; no Anthropic settings."""
    return isolated_runs_dir(tmp_path, monkeypatch)


def table(ds) -> list[dict]:
    return files.read_jsonl(ds.source)


def reply_of(question: str) -> str:
    """The reply a judge prompt asks about (judging.SCORE_TEMPLATE)."""
    return question.split("[Assistant's reply]\n", 1)[1].split("\n\nAnswer with a JSON", 1)[0]


def scoring(score_of):
    """A plain-function judge: score_of(reply) -> 1..10, answered as parsed JSON."""
    asked: list[str] = []

    def judge(questions: list[str]) -> list[dict]:
        asked.extend(questions)
        return [{"score": score_of(reply_of(q)), "rationale": "rule"} for q in questions]

    judge.asked = asked  # type: ignore[attr-defined]
    return judge


# -- the quality pass ----------------------------------------------------------------------------


SCRIPT = {
    "fine": "Restart the router, then wait two minutes.",
    "refuse": Reply(text="I can't help with that.", refusal=True),
    "blank": "   ",
    "fail": Reply(error="HTTP 400: too long"),
    "short": "ok",
    "long": "word " * 40,
    "symbols": "#### ---- $$$$ 1234 5678 !!!!",
    "broken": "Restart the r\ufffdouter please.",
    "same": "Restart the router, then wait two minutes.",
    "near": "Restart the router then wait two minutes!",
    "other": "Check the cable is plugged in firmly.",
}


def scripted_teacher(prompts: list[str]) -> list:
    return [SCRIPT[p.split()[0]] for p in prompts]


def test_the_quality_pass_drops_each_reason_and_keeps_the_rest(runs):
    prompts = [f"{k} question" for k in SCRIPT] + ["fine question", "  "]
    ds = dragon.synthesize(
        prompts, scripted_teacher, min_chars=5, max_chars=120, min_alpha_ratio=0.5
    )
    s = ds.synthesis
    assert s["in"] == len(prompts) and s["kept"] == 2
    assert {k: n for k, n in s["dropped"].items() if n} == {
        "empty_prompt": 1, "duplicate_prompt": 1, "refusal": 1, "empty": 1, "error": 1,
        "too_short": 1, "too_long": 1, "garbled": 2, "duplicate_response": 1,
        "near_duplicate_response": 1,
    }  # fmt: skip
    assert [r["prompt"] for r in table(ds)] == ["fine question", "other question"]
    assert table(ds)[0]["response"] == SCRIPT["fine"]
    assert s["dropped_examples"]["too_short"][0]["prompt"] == "short question"
    assert ds.mapping.kind == "sft" and len(ds.records()) == 2


def test_repeated_prompts_are_never_asked_and_dedupe_false_keeps_repeats():
    asked: list[str] = []

    def teacher(prompts):
        asked.extend(prompts)
        return ["The same stock answer." for _ in prompts]

    ds = dragon.synthesize(["a", "b", "a"], teacher)
    assert asked == ["a", "b"]  # the repeat was dropped before anyone was asked
    assert ds.synthesis["dropped"]["duplicate_prompt"] == 1
    assert ds.synthesis["dropped"]["duplicate_response"] == 1 and ds.synthesis["kept"] == 1
    kept = dragon.synthesize(["a", "b", "a"], teacher, dedupe=False)
    assert kept.synthesis["kept"] == 3


def test_near_duplicates_follow_the_threshold():
    texts = [
        "Unplug the hub for ten seconds and then plug it back in firmly.",
        "Unplug the hub for ten seconds and then plug it back in firmly please.",
    ]  # 95%
    teacher = dict(zip(["p1", "p2"], texts, strict=True))
    strict = dragon.synthesize(["p1", "p2"], lambda ps: [teacher[p] for p in ps])
    loose = dragon.synthesize(
        ["p1", "p2"], lambda ps: [teacher[p] for p in ps], near_dup_threshold=0.99
    )
    assert strict.synthesis["dropped"]["near_duplicate_response"] == 1
    assert loose.synthesis["kept"] == 2


def test_repeats_marks_exact_and_near_repeats():
    texts = ["Reset the router.", "Call us.", "Reset the router.", "Reset the router!", "x y"]
    assert repeats(texts) == [None, None, ("exact", 0), ("near", 0), None]


def test_garbled_text():
    assert garbled("bad \x00 byte") and garbled("mojibake \ufffd")
    assert not garbled("1234 5678") and garbled("1234 5678", 0.5)
    assert not garbled("Fine words, 12 of them.", 0.5)


# -- the judge gate ------------------------------------------------------------------------------


def test_the_judge_gate_keeps_replies_at_or_above_min_score():
    answers = {"a": "great reply", "b": "okay reply", "c": "bad reply", "d": "silent reply"}
    marks = {"great reply": 9, "okay reply": 7, "bad reply": 3}

    def judge(questions):
        return [
            {"score": marks[reply_of(q)], "rationale": ""} if reply_of(q) in marks else "no JSON"
            for q in questions
        ]

    ds = dragon.synthesize(list(answers), lambda ps: [answers[p] for p in ps], judge=judge)
    assert [r["response"] for r in table(ds)] == ["great reply", "okay reply"]
    assert [r["score"] for r in table(ds)] == [9, 7]
    dropped = ds.synthesis["dropped"]
    assert dropped["below_min_score"] == 1 and dropped["unscored"] == 1
    assert ds.synthesis["judge"]["provider"] == "function"
    assert ds.synthesis["settings"]["min_score"] == 7


def test_the_judge_only_sees_replies_that_survived_and_their_reference_and_system():
    tickets = dragon.dataset(dragon.example_data()).map(
        prompt="{subject}\n\n{body}", response="reply"
    )
    few = dragon.dataset(tickets.frame.head(3), name="few").map(
        prompt="{subject}\n\n{body}", response="reply", system="Be concise."
    )
    judge = scoring(lambda reply: 8)
    answers = iter(["Short.", "A full reply with steps.", "Another full reply."])
    ds = dragon.synthesize(few, lambda ps: [next(answers) for _ in ps], judge=judge, min_chars=8)
    assert ds.synthesis["dropped"]["too_short"] == 1
    assert len(judge.asked) == 2  # the short reply was never sent to the judge
    assert "Be concise." in judge.asked[0]
    assert tickets.frame.reply[1] in judge.asked[0]  # the data's own reply as the reference
    assert all(r["system"] == "Be concise." for r in table(ds))


def test_a_prompt_list_from_a_mapped_dataset_and_its_split():
    ds = dragon.dataset(dragon.example_data()).map_prompts(prompt="{subject}").split(0.2, seed=3)
    out = dragon.synthesize(ds, lambda ps: [f"Answer: {p}" for p in ps], system="Sys.")
    assert out.synthesis["in"] == 200 and out.synthesis["kept"] == 200 - sum(
        out.synthesis["dropped"].values()
    )
    assert out.synthesis["dropped"]["near_duplicate_response"] > 0  # subjects repeat a lot
    assert (out.eval_frac, out.seed, out.split_set) == (0.2, 3, True)
    assert out.records()[0]["messages"][0] == {"role": "system", "content": "Sys."}


# -- teachers: API clients, local models ---------------------------------------------------------


def test_anthropic_teacher_through_the_official_client_gets_the_system(monkeypatch, runs):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://unused")
    with FakeAnthropic(answer=lambda p: {"text": f"Claude says: {p}"}) as server:
        teacher = dragon.llm_anthropic(api_key=CANARY, base_url=server.url, max_tokens=64)
        ds = dragon.synthesize(["one", "two"], teacher, system="You are warm.")
    assert [r["response"] for r in table(ds)] == ["Claude says: one", "Claude says: two"]
    assert {r["body"]["system"] for r in server.requests} == {"You are warm."}
    assert ds.synthesis["usage"]["teacher"]["requests"] == 2
    assert ds.synthesis["teacher"]["provider"] == "anthropic"
    # The key typed in reached the server and nothing written: data, record, cache.
    headers = server.requests[0]["headers"]
    assert CANARY in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    for path in runs.rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_openai_teacher_keeps_its_own_system_and_records_refusals(runs):
    script = [{"text": "Fine answer."}, {"refusal": True}, {"status": 500}, {"text": ""}]
    with FakeOpenAI(script=script, answer=lambda p: {"text": "Retried answer."}) as server:
        teacher = dragon.llm_openai("m", server.url, system="Own persona.")
        teacher.backoff = teacher.max_wait = 0.01
        teacher.max_active = 1
        ds = dragon.synthesize(["a", "b", "c", "d"], teacher, system="Row persona.")
    sent = [r["body"]["messages"][0] for r in server.requests]
    assert {m["content"] for m in sent} == {"Own persona."}  # the one it was built with wins
    assert [r["response"] for r in table(ds)] == ["Fine answer.", "Retried answer."]
    assert ds.synthesis["dropped"]["refusal"] == 1 and ds.synthesis["dropped"]["empty"] == 1
    assert all(r["system"] == "Row persona." for r in table(ds))  # what the student learns


class Scripted:
    """A backend answering with its own model, like a server: no weights needed."""

    name = "server"
    model = "scripted-model"

    def __init__(self) -> None:
        self.calls: list[list] = []

    def chat(self, model, messages, sampling, on_token=None):
        return f"local answer to {messages[-1]['content']} at t={sampling.temperature}"

    def generate(self, model, conversations, sampling):
        self.calls.append(conversations)
        return [self.chat(model, c, sampling) for c in conversations]


def test_a_model_id_as_teacher_answers_through_the_inference_backend():
    backend = Scripted()
    previous = dragon.set_backend(backend)
    try:
        ds = dragon.synthesize(
            ["Wi-Fi drops", "Invoice wrong?"], "scripted-model", system="S.", temperature=0.2
        )
    finally:
        dragon.set_backend(previous)
    assert [r["response"] for r in table(ds)] == [
        "local answer to Wi-Fi drops at t=0.2", "local answer to Invoice wrong? at t=0.2"
    ]  # fmt: skip
    assert len(backend.calls) == 1 and backend.calls[0][0][0] == {"role": "system", "content": "S."}
    assert ds.synthesis["teacher"]["provider"] == "local"


# -- pairs ---------------------------------------------------------------------------------------


def test_pairs_judge_mode_best_against_worst_with_gap_identical_and_scores():
    samples = {
        "spread": ["good 9", "bad 2", "mid 5", "good 9"],
        "close": ["a 6", "b 5", "c 6", "d 5"],
        "same": ["same 8", "same 8", "same 8", "same 8"],
        "broken": [Reply(refusal=True, text="no"), "x 5", Reply(empty=True), Reply(error="e")],
    }
    calls: list[list[str]] = []

    def student(prompts):
        calls.append(prompts)
        seen: dict[str, int] = {}
        out = []
        for p in prompts:
            out.append(samples[p][seen.get(p, 0)])
            seen[p] = seen.get(p, 0) + 1
        return out

    judge = scoring(lambda reply: int(reply.split()[-1]))
    pairs = dragon.synthesize_pairs(list(samples), student, judge=judge)
    assert calls == [[p for p in samples for _ in range(4)]]  # one batched call, n per prompt
    assert table(pairs) == [
        {"prompt": "spread", "chosen": "good 9", "rejected": "bad 2",
         "chosen_score": 9, "rejected_score": 2},
    ]  # fmt: skip
    dropped = pairs.synthesis["dropped"]
    assert dropped["too_close"] == 1 and dropped["identical"] == 1
    assert dropped["too_few_samples"] == 1
    assert len(judge.asked) == 3 + 4  # each distinct sample once; identical ones never
    assert pairs.synthesis["samples"] == {
        "asked": 16, "ok": 13, "refusal": 1, "empty": 1, "error": 1
    }  # fmt: skip
    assert pairs.mapping.kind == "pairs" and pairs.synthesis["mode"] == "judge"
    loose = dragon.synthesize_pairs(["close"], student, judge=judge, min_gap=1)
    assert table(loose)[0]["chosen"] == "a 6" and table(loose)[0]["rejected"] == "d 5"


def test_pairs_teacher_mode_prefers_the_teacher_and_drops_identical_pairs():
    teacher = {"p1": "Teacher reply one.", "p2": "Same reply.", "p3": Reply(refusal=True)}
    pairs = dragon.synthesize_pairs(
        ["p1", "p2", "p3"],
        student=lambda ps: ["Student reply." if p != "p2" else "Same reply." for p in ps],
        teacher=lambda ps: [teacher[p] for p in ps],
        system="Sys.",
    )
    assert table(pairs) == [
        {"prompt": "p1", "chosen": "Teacher reply one.", "rejected": "Student reply.",
         "system": "Sys."},
    ]  # fmt: skip
    assert pairs.synthesis["dropped"]["identical"] == 1
    assert pairs.synthesis["dropped"]["teacher_failed"] == 1
    record = pairs.records()[0]
    assert record["prompt"][0]["content"] == "Sys." and record["chosen"][0]["role"] == "assistant"


def test_pairs_teacher_mode_with_a_judge_keeps_only_clear_wins():
    judge = scoring(lambda reply: {"T good": 9, "T meh": 6, "S": 5}[reply.split(":")[0]])
    teacher = {"p1": "T good: fix", "p2": "T meh: fix"}
    pairs = dragon.synthesize_pairs(
        ["p1", "p2"],
        student=lambda ps: [f"S: {p}" for p in ps],
        teacher=lambda ps: [teacher[p] for p in ps],
        judge=judge,
    )
    assert [(r["prompt"], r["chosen_score"], r["rejected_score"]) for r in table(pairs)] == [
        ("p1", 9, 5)
    ]
    assert pairs.synthesis["dropped"]["too_close"] == 1


def test_pairs_need_a_judge_or_a_teacher():
    with pytest.raises(ValueError, match="judge= or teacher="):
        dragon.synthesize_pairs(["p"], student=lambda ps: ps)


# -- files, records, reproducibility -------------------------------------------------------------


def test_the_file_is_the_source_and_code_of_a_run_trained_on_it_rebuilds_it(
    runs, model_dir, monkeypatch
):
    monkeypatch.setattr(launch, "start_run", lambda run_dir, **fields: 0)  # written, not run
    ds = dragon.synthesize(
        ["q1", "q2"], lambda ps: [f"Reply to {p}." for p in ps], name="mine", runs_dir=runs
    )
    path = Path(ds.source)
    assert path.parent == runs / files.SYNTHETIC_DIR and path.name.startswith("mine-")
    record = json.loads(synthesis_files.record_path(path).read_text())
    assert record["kept"] == 2 and record["file"] == str(path)
    run = dragon.train(ds, str(model_dir), runs_dir=runs)
    script = code(run)
    assert json.dumps(str(path)) in script and 'name="mine"' in script
    namespace: dict = {}
    exec(script.split("\nrun = ", 1)[0], namespace)  # the import and the dataset line
    assert namespace["ds"].records() == ds.records()
    # A pairs file the same way, through prefer().
    pairs = dragon.synthesize_pairs(
        ["q1"], student=lambda ps: ["meh"] * len(ps), teacher=lambda ps: ["best"] * len(ps)
    )
    dpo = dragon.prefer(pairs, str(model_dir), runs_dir=runs)
    assert ".map_pairs(" in code(dpo) and json.dumps(pairs.source) in code(dpo)


def test_open_synthesized_reads_the_result_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # file= relative to the working directory, made absolute
    ds = dragon.synthesize(["q"], lambda ps: ["An answer."], file=Path("out") / "my.jsonl")
    again = synthesis_files.open_synthesized(ds.source)
    assert again.synthesis == ds.synthesis and again.records() == ds.records()
    assert Path(ds.source) == tmp_path / "out" / "my.jsonl"
    with pytest.raises(ValueError, match="end the name in .jsonl"):
        dragon.synthesize(["q"], lambda ps: ["An answer."], file="my.csv")
    # Its record torn by a killed writer: a clear refusal naming it, not a JSON error.
    synthesis_files.record_path(Path(ds.source)).write_text('{"kind": "synth')
    with pytest.raises(FileNotFoundError, match="is missing, damaged or not a synthesis record"):
        synthesis_files.open_synthesized(ds.source)


def test_nothing_kept_raises_with_the_record_and_writes_nothing(runs):
    with pytest.raises(synthesis.SynthesisError, match="Nothing was kept of 2 prompts") as e:
        dragon.synthesize(["a", "b"], lambda ps: ["no"] * len(ps), min_chars=10)
    assert e.value.synthesis["dropped"]["too_short"] == 2
    assert not (runs / files.SYNTHETIC_DIR).exists()


def test_progress_is_reported_and_an_interrupt_writes_nothing(runs, monkeypatch):
    monkeypatch.setattr(synthesis_asking, "BATCH", 2)
    seen: list[tuple] = []
    ds = dragon.synthesize(
        ["a", "b", "c"], lambda ps: [f"reply {p}" for p in ps], judge=scoring(lambda r: 8),
        progress=lambda *a: seen.append(a),
    )  # fmt: skip
    assert ds.synthesis["kept"] == 3
    assert seen[:2] == [("teacher", 2, 3), ("teacher", 3, 3)] and seen[-1] == ("judge", 3, 3)

    def interrupted(prompts):
        if "c" in prompts:
            raise KeyboardInterrupt
        return ["fine"] * len(prompts)

    before = set(runs.rglob("*.jsonl"))
    with pytest.raises(KeyboardInterrupt):
        dragon.synthesize(["a", "b", "c"], interrupted)
    assert set(runs.rglob("*.jsonl")) == before


def test_bad_inputs_say_what_to_do():
    with pytest.raises(TypeError, match="wrap a single prompt in a list"):
        dragon.synthesize("one prompt", lambda ps: ps)
    with pytest.raises(TypeError, match=r"prompts\[1\] is int"):
        dragon.synthesize(["a", 2], lambda ps: ps)
    with pytest.raises(dragon.DatasetError, match="not mapped yet"):
        dragon.synthesize(dragon.dataset(dragon.example_data()), lambda ps: ps)
    with pytest.raises(TypeError, match="teacher must be"):
        dragon.synthesize(["a"], 42)
    with pytest.raises(ValueError, match="near_dup_threshold"):
        dragon.synthesize(["a"], lambda ps: ps, near_dup_threshold=92)
    with pytest.raises(ValueError, match="n_samples"):
        dragon.synthesize_pairs(["a"], lambda ps: ps, judge=lambda qs: qs, n_samples=1)
    with pytest.raises(ValueError, match="returned 0 replies for 1"):
        dragon.synthesize(["a"], lambda ps: [])


# -- from the app: a job -------------------------------------------------------------------------


def test_a_synthesis_job_with_a_typed_key_writes_the_data_and_never_the_key(runs):
    def answer(prompt):
        if "Rate the assistant's reply" in prompt:
            return {"text": json.dumps({"score": 3 if "bad" in prompt else 9, "rationale": "r"})}
        return {"text": f"Teacher: {prompt} is fixed by a restart."}

    with FakeOpenAI(answer=answer) as server:
        teacher = dragon.llm_openai("m", server.url, api_key=CANARY)
        judge = dragon.judge_openai("m", server.url, api_key=CANARY)
        job = synthesis_jobs.start_synthesis(
            "synthesize",
            ["wifi drops", "bad invoice"],
            {"teacher": teacher, "judge": judge},
            {"system": "Be warm.", "min_chars": 5},
            runs_dir=runs,
        )
        status = job.wait(timeout=120)
        assert status["state"] == "succeeded", job.logs(30)
        ds = job.result()
    assert [r["prompt"] for r in table(ds)] == ["wifi drops"]
    assert ds.synthesis["dropped"]["below_min_score"] == 1
    assert ds.synthesis["settings"]["system"] == "Be warm."
    assert job.progress()["stage"] == "judge"
    assert all(CANARY in sent_key(r) for r in server.requests)
    for path in runs.rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_pairs_job_that_keeps_nothing_reports_why(runs):
    with FakeOpenAI(answer=lambda p: {"text": "Always the same."}) as server:
        job = synthesis_jobs.start_synthesis(
            "synthesize_pairs",
            ["p1", "p2"],
            {"student": dragon.llm_openai("m", server.url),
             "judge": dragon.judge_openai("m", server.url)},
            {"n_samples": 3},
            runs_dir=runs,
        )  # fmt: skip
        assert job.wait(timeout=120)["state"] == "succeeded", job.logs(30)
    with pytest.raises(synthesis.SynthesisError) as e:
        job.result()
    assert e.value.synthesis["dropped"]["identical"] == 2


def test_a_job_refuses_a_plain_function_and_bad_settings(runs):
    class Chat:
        def chat(self, prompt, **kwargs):
            return "hi"

    with pytest.raises(ValueError, match="cannot run as a background job"):
        synthesis_jobs.start_synthesis(
            "synthesize", ["p"], {"teacher": dragon.llm_openai("m", "http://x/v1"),
                                  "judge": dragon.judge_chatlas(Chat())},
            {}, runs_dir=runs,
        )  # fmt: skip
    with pytest.raises(TypeError, match="teacher must be an LLM"):
        synthesis_jobs.start_synthesis("synthesize", ["p"], {"teacher": lambda ps: ps}, {}, runs)
    with pytest.raises(ValueError, match="min_score"):
        synthesis_jobs.start_synthesis(
            "synthesize", ["p"], {"teacher": "m"}, {"min_score": 11}, runs
        )
    assert not (runs / files.JOBS_DIR).exists()


def sent_key(request: dict) -> str:
    headers = request["headers"]
    return headers.get("x-api-key") or headers.get("authorization", "")


def test_llm_call_rebuilds_the_model_a_description_names():
    from dragonfarm_core.codegen.run import llm_call

    made = [
        dragon.llm_anthropic(system="Warm.", max_tokens=300, temperature=0.2, base_url="http://a"),
        dragon.judge_anthropic(api_key=CANARY),
        dragon.llm_openai("m", "http://h:1/v1", api_key_env="MY_KEY", system="S."),
        dragon.judge_openai("m", "http://h:1/v1"),
    ]

    def public(d):  # what the code must rebuild: everything but how a key was given
        return {k: v for k, v in d.items() if k not in ("api_key", "api_key_env")}

    for f in made:
        expr = llm_call(f.describe())
        assert CANARY not in expr
        again = eval(expr, {"dragon": dragon})
        assert public(again.describe()) == public(f.describe()), expr
    assert 'api_key_env="MY_KEY"' in llm_call(made[2].describe())
    assert llm_call(dragon.llm_local("some/model").describe()) == '"some/model"'
    assert llm_call(made[1].describe()) == "dragon.judge_anthropic()"
