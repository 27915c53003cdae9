"""`dragonfarm serve`: a run or model as an OpenAI-compatible chat-completions API."""
