r"""Candidate generators (adaptive batches, Thompson sampling, domain shrinking)."""
