r"""Data, GP models and an exact-GP oracle shared by several test modules.

Each test module keeps its own sizes, seeds and kernel values; these builders fix what
the modules share: noisy sine data, a scaled RBF kernel set from numbers, an RBF
kernel that records the blocks it evaluates, an SVGP and an exact GP with the same
fixed noise and ``Normalize``/``Standardize`` transforms, and the zero-mean exact GP
posterior that incremental updates are checked against.
"""

import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.means import ZeroMean
from torch import Tensor

from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.variational import DecomposedSamplingSVGP

DTYPE = torch.float64
NOISE = 0.05

#: ``(rtol, atol)`` of :func:`assert_close` per dtype: float32 oracles agree to about
#: ``1e-4`` relative (the exact GP's solves lose ~3 digits on these kernels).
TOLERANCES = {torch.float32: (1e-3, 1e-4), torch.float64: (1e-7, 1e-9)}


def assert_close(actual: Tensor, expected: Tensor, scale: float = 1.0) -> None:
    r"""``torch.testing.assert_close`` with :data:`TOLERANCES` for ``actual``'s
    dtype, both multiplied by ``scale`` (for oracles with known worse conditioning);
    ``expected`` is cast to ``actual``'s dtype and device first."""
    rtol, atol = TOLERANCES[actual.dtype]
    expected = expected.to(actual)
    torch.testing.assert_close(actual, expected, rtol=scale * rtol, atol=scale * atol)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sine_data(
    n: int = 40,
    d: int = 2,
    *,
    seed: int = 0,
    dtype: torch.dtype = DTYPE,
    scale: float = 1.0,
    frequency: float = 5.0,
    offset: float = 0.0,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    r"""``n x d`` uniform points ``X`` in ``[0, scale]^d`` and ``n x 1`` targets
    ``offset + sum_i sin(frequency x_i / scale) + 0.2 eps``, ``eps ~ N(0, 1)``.

    Drawn on the CPU, then moved to ``device``: the same numbers on every device."""
    g = seeded(seed)
    X = scale * torch.rand(n, d, generator=g, dtype=dtype)
    Y = offset + torch.sin(frequency * X / scale).sum(-1, keepdim=True)
    Y = Y + 0.2 * torch.randn(n, 1, generator=g, dtype=dtype)
    return X.to(device=device), Y.to(device=device)


def uniform(
    *shape: int,
    seed: int,
    scale: float = 1.0,
    dtype: torch.dtype = DTYPE,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Uniform points in ``[0, scale]`` of shape ``shape``, drawn on the CPU from
    ``seed`` and moved to ``device`` (the same numbers on every device)."""
    X = scale * torch.rand(*shape, generator=seeded(seed), dtype=dtype)
    return X.to(device=device)


def rbf_kernel(
    lengthscale: float,
    outputscale: float | None = None,
    dtype: torch.dtype = DTYPE,
    device: torch.device | str | None = None,
) -> ScaleKernel:
    r"""``ScaleKernel(RBFKernel())`` with these values (outputscale: GPyTorch's
    default when None) on ``device``."""
    kernel = ScaleKernel(RBFKernel())
    kernel.base_kernel.lengthscale = lengthscale
    if outputscale is not None:
        kernel.outputscale = outputscale
    return kernel.to(device=device, dtype=dtype)


class ShapeRecordingRBF(RBFKernel):
    r"""RBF kernel that records the shape of every kernel block it evaluates (to
    check that no ``n x n`` block is ever formed)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = []

    def forward(self, x1, x2, diag=False, **params):
        self.blocks.append((x1.shape[-2], 1 if diag else x2.shape[-2]))
        return super().forward(x1, x2, diag=diag, **params)


def transformed_svgp(
    X: Tensor, Y: Tensor, num_inducing: int, kernel: ScaleKernel
) -> DecomposedSamplingSVGP:
    r"""A ``DecomposedSamplingSVGP`` with noise ``NOISE`` and input/outcome
    transforms, on ``X``'s dtype and device."""
    return DecomposedSamplingSVGP(
        X,
        Y,
        num_inducing=num_inducing,
        covar_module=kernel,
        noise=NOISE,
        input_transform=Normalize(X.shape[-1]).to(X),
        outcome_transform=Standardize(1).to(X),
    )


def transformed_exact_gp(X: Tensor, Y: Tensor, kernel: ScaleKernel) -> SingleTaskGP:
    r"""The exact counterpart of :func:`transformed_svgp`, in eval mode."""
    model = SingleTaskGP(
        X,
        Y,
        train_Yvar=torch.full_like(Y, NOISE),
        covar_module=kernel,
        input_transform=Normalize(X.shape[-1]).to(X),
        outcome_transform=Standardize(1).to(X),
    )
    return model.eval()


def zero_mean_gp_posterior(
    train_X: Tensor, train_y: Tensor, noise_variance: float, kernel: Kernel, X: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Posterior mean and variance (each of shape ``n``) at the ``n x d`` points
    ``X`` of a ``SingleTaskGP`` built from scratch: zero mean, ``kernel``, fixed noise
    ``noise_variance``, no transforms, fitted to ``train_X`` and the 1-d ``train_y``."""
    train_Y = train_y.unsqueeze(-1)
    model = SingleTaskGP(
        train_X,
        train_Y,
        train_Yvar=torch.full_like(train_Y, noise_variance),
        covar_module=kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    ).eval()
    with torch.no_grad():
        posterior = model.posterior(X)
    return posterior.mean.squeeze(-1), posterior.variance.squeeze(-1)


def wave_data(n=60, d=2, dtype=DTYPE, scale=2.0, device=None):
    r"""The Thompson-sampling tests' data: a sine wave on ``[0, scale]^d``."""
    return sine_data(
        n, d, dtype=dtype, scale=scale, frequency=4.0, offset=3.0, device=device
    )


def wave_svgp(dtype=DTYPE, device=None):
    X, Y = wave_data(dtype=dtype, device=device)
    return transformed_svgp(X, Y, 15, rbf_kernel(0.25, 1.2, dtype, device))


def wave_exact_gp(dtype=DTYPE, device=None):
    X, Y = wave_data(dtype=dtype, device=device)
    return transformed_exact_gp(X, Y, rbf_kernel(0.25, 1.2, dtype, device))


def wave_nystrom(dtype=DTYPE, device=None):
    r"""A ``NystromGP`` on the wave data with a sampled dictionary and the
    transforms of :func:`wave_svgp`."""
    X, Y = wave_data(dtype=dtype, device=device)
    return NystromGP(
        X,
        Y,
        covar_module=rbf_kernel(0.25, 1.2, dtype, device),
        noise=NOISE,
        input_transform=Normalize(X.shape[-1]).to(X),
        outcome_transform=Standardize(1).to(X),
        generator=seeded(0),
    )


#: The models whose sample paths are checked against their exact posteriors.
WAVE_MODELS = {"svgp": wave_svgp, "nystrom": wave_nystrom, "exact": wave_exact_gp}


def wave_points(n=5, dtype=DTYPE, seed=11, device=None):
    return uniform(n, 2, seed=seed, scale=2.0, dtype=dtype, device=device)


def assert_loop_matches_scratch(loop, **tolerances: float) -> None:
    r"""A ``BBKB`` loop's candidate state equals one rebuilt from scratch from its
    observations and dictionary, with its kernel, ``lambda``, kernel inputs and
    targets (its rewards, or their warped values: ``loop.targets_of``;
    ``tolerances``: ``rtol`` and ``atol`` of ``assert_close``; its defaults
    otherwise)."""
    from botorch_sketch.models.candidate_state import CandidateState

    scratch = CandidateState.from_observations(
        loop.kernel_inputs,
        loop.covar_module,
        loop.noise,
        loop.observed,
        loop.targets_of(loop.rewards),
        loop.state.dictionary,
    )
    torch.testing.assert_close(loop.state.mean, scratch.mean, **tolerances)
    torch.testing.assert_close(loop.state.variance, scratch.variance, **tolerances)
