r"""Small shared helpers: argument validation and problem fingerprints.

They serve the other layers and are no part of the public API: nothing is exported.
"""

__all__: list[str] = []
