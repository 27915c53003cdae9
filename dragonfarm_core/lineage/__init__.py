"""Lineage: what a run, a data file, a pipeline or an export came from and what came from it,
read from the files that already exist (`lineage.lineage`)."""
