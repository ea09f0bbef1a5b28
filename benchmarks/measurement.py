r"""Benchmark measurement: peak memory of a run (:class:`PeakMemoryMonitor`) and the
machine's matmul throughput (:func:`measure_matmul_gflops`)."""

from __future__ import annotations

import ctypes
import math
import os
import resource
import sys
import threading
import time

import torch


def _current_rss_bytes() -> int | None:
    r"""Resident set size from ``/proc/self/statm`` (None where unavailable)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def max_rss_bytes() -> int:
    r"""The process's peak resident set size so far (``getrusage``), in bytes."""
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _release_free_heap() -> None:
    r"""Return freed heap pages to the OS (glibc only) so baselines are not inflated."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemoryMonitor:
    r"""Peak memory growth of the process during a ``with`` block, ``peak_mb``.

    CPU: the highest resident set size sampled every ``interval`` seconds by a
    thread, minus the RSS at entry (an allocation shorter than ``interval`` can be
    missed); without ``/proc``, the growth of ``getrusage`` max RSS (a lower bound).
    CUDA: the growth of ``torch.cuda.max_memory_allocated``. ``method`` says which.
    """

    def __init__(
        self, device: torch.device | str | None = None, interval: float = 0.005
    ):
        self.device = torch.device("cpu" if device is None else device)
        self.interval = interval
        self.peak_mb = math.nan
        self.method = ""

    def __enter__(self) -> PeakMemoryMonitor:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._baseline = torch.cuda.memory_allocated(self.device)
            self.method = "cuda max_memory_allocated growth"
            return self
        _release_free_heap()
        self._baseline = _current_rss_bytes()
        if self._baseline is None:
            self._baseline = max_rss_bytes()
            self.method = "ru_maxrss growth (lower bound)"
            return self
        self.method = f"sampled RSS growth (every {self.interval * 1e3:g} ms)"
        self._peak = self._baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, _current_rss_bytes() or 0)
            time.sleep(self.interval)

    def __exit__(self, *exc_info: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        elif self.method.startswith("ru_maxrss"):
            peak = max_rss_bytes()
        else:
            self._stop.set()
            self._thread.join()
            peak = max(self._peak, _current_rss_bytes() or 0)
        self.peak_mb = max(peak - self._baseline, 0) / 2**20


def matmul_flops(
    rows: int,
    inner: int,
    cols: int = 1,
    repeats: int = 3,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> float:
    r"""Best-of-``repeats`` throughput of ``(rows x inner) @ (inner x cols)`` products
    (``2 rows inner cols`` flops each, after one warm-up product), in flop/s."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, inner, generator=generator).to(dtype=dtype, device=device)
    b = torch.randn(inner, cols, generator=generator).to(dtype=dtype, device=device)
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    a @ b
    sync()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * rows * inner * cols / best


def measure_matmul_gflops(
    size: int = 1024,
    repeats: int = 3,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> float:
    r"""Best-of-``repeats`` throughput of a ``size x size`` matrix product, GFLOP/s
    (:func:`matmul_flops` of square products)."""
    return matmul_flops(size, size, size, repeats, dtype, device) / 1e9
