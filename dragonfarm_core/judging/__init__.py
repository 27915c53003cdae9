"""Judging replies with a language model: judges, what they are asked, `judge()`."""
