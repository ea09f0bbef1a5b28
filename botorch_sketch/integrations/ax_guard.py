r"""The message raised by the Ax integration modules when ax-platform is missing.

Each of them starts with::

    try:
        import ax  # noqa: F401
    except ImportError as error:
        raise ImportError(AX_INSTALL_HINT) from error
"""

from botorch_sketch.utils.extras import install_hint

AX_INSTALL_HINT = (
    "botorch_sketch.integrations.ax needs the optional dependency ax-platform. "
    + install_hint("ax")
)
