"""Ollama: the Go chat template, its check, the Modelfile and the registration."""
