import math
import os
import time

import pytest
import torch

from benchmarks.measurement import (
    PeakMemoryMonitor,
    matmul_flops,
    max_rss_bytes,
    measure_matmul_gflops,
)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_peak_memory_monitor_sees_a_large_tensor():
    with PeakMemoryMonitor(interval=0.001) as monitor:
        block = torch.ones(12_500_000, dtype=torch.float64)  # 95 MiB, touched
        block.add_(1.0)
        time.sleep(0.05)
        del block
    assert "RSS" in monitor.method
    assert 80 <= monitor.peak_mb <= 400
    with PeakMemoryMonitor() as idle:
        pass
    assert idle.peak_mb < 30


def test_matmul_throughput_is_measured():
    gflops = measure_matmul_gflops(size=128, repeats=2)
    assert math.isfinite(gflops) and gflops > 0


def test_matmul_flops_of_rectangular_products():
    assert matmul_flops(64, 32) > 0
    assert matmul_flops(64, 32, 8, repeats=2, dtype=torch.float32) > 0


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_max_rss_bytes_is_at_least_the_current_rss_in_bytes():
    block = torch.ones(2**23, dtype=torch.float64)  # 64 MiB, touched
    with open("/proc/self/statm") as handle:
        current = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert current >= block.numel() * 8
    assert max_rss_bytes() >= current  # a unit slip (KiB) would be 1024x smaller
