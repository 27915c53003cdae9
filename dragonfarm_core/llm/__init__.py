"""Language models as functions: judges, teachers and students from prompts to replies.

    f = dragon.llm_anthropic(system="You are a concise support agent.")
    replies = f(["My thermostat drops off Wi-Fi."])   # [Reply('...')]: each a str, and .ok
    f.usage, f.describe()                              # tokens so far; a record without secrets

`base` has the shared machinery (Reply, threads, retries, cache); `providers` the
constructors. Imports no client library until a request is made.
"""

from dragonfarm_core.llm.base import JUDGE_SYSTEM, LLM, Reply, parse_json_answer
from dragonfarm_core.llm.providers import (
    AnthropicLLM,
    ChatlasLLM,
    LocalLLM,
    OpenAILLM,
    judge_anthropic,
    judge_chatlas,
    judge_local,
    judge_openai,
    llm_anthropic,
    llm_chatlas,
    llm_local,
    llm_openai,
)

__all__ = [
    "JUDGE_SYSTEM",
    "LLM",
    "AnthropicLLM",
    "ChatlasLLM",
    "LocalLLM",
    "OpenAILLM",
    "Reply",
    "judge_anthropic",
    "judge_chatlas",
    "judge_local",
    "judge_openai",
    "llm_anthropic",
    "llm_chatlas",
    "llm_local",
    "llm_openai",
    "parse_json_answer",
]
