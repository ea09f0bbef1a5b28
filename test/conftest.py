r"""Test-session settings: one torch thread (the tests use small matrices, where
thread start-up and contention cost more than they save)."""

import torch

torch.set_num_threads(1)
