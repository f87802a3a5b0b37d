"""Environments and code: the snapshot of a job's code folder (container images later)."""
