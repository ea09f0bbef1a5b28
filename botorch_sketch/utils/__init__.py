r"""Small shared helpers: argument validation."""
