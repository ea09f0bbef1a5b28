r"""One BLAS thread for scipy's L-BFGS-B runs (the loops' refits, the UCB's
maximization), as BoTorch's ``minimize_with_timeout`` limits them: from scipy 1.15
a run otherwise left a BLAS thread spinning on another core (scipy#22438)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache

from threadpoolctl import ThreadpoolController


@cache
def _controller() -> ThreadpoolController:
    r"""The loaded BLAS libraries' thread pools, found once (``threadpool_limits``
    finds them anew at each call: 1-2 ms)."""
    return ThreadpoolController()


def one_blas_thread() -> AbstractContextManager:
    r"""A context in which the BLAS libraries use one thread.

    Example:
        >>> with one_blas_thread():
        ...     result = scipy.optimize.minimize(f, x0, method="L-BFGS-B")
    """
    return _controller().limit(limits=1, user_api="blas")
