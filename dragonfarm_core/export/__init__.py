"""Export: merged weights, GGUF, the Hub with a model card, and Ollama (export/ollama/)."""
