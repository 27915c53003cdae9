"""Synthesis: training data from a teacher, preference pairs from a model's own samples."""
