"""llama.cpp: where it is, building it offline, and its server on a GGUF."""
