r"""Acquisition functions for sketched GP bandits."""
