"""Pipelines: the post-training loop as one declared, resumable background job."""
