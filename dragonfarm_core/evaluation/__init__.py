"""Evaluation: `evaluate()`, task metrics, and `compare()`."""
