r"""Integrations with other tools (Ax)."""
