r"""Sketched Gaussian-process models."""
