"""Runs: the run-directory contract (files), creating and launching runs, jobs, the queue, and
the `Run` object and runs table. The public names are imported by `dragonfarm_core` itself from
the modules here.
"""
