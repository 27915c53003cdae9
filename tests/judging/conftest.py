"""Every test here keeps its runs dir (and so the response cache) in its own tmp folder, with no
Anthropic settings from the environment, as in tests/llm/ (the same autouse fixture)."""

from tests.llm.conftest import llm_runs_dir  # noqa: F401  (an autouse fixture, found by name)
