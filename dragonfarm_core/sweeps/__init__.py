"""Sweeps: a search over a run's settings with Optuna, each trial a run (`sweep`), the
space and objective checked first (`space`), the study and its mirror (`study`), the
background process (`job`)."""
