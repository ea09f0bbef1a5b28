r"""Per-step wall time of S-GP-TS against exact GP-TS on S-GP-TS's Hartmann-6.

One Thompson step (``q = 1``) draws one sample path with ``M`` random Fourier
features, takes its argmax over ``N`` candidate arms and conditions the model on the
new noisy observation. The benchmark times such steps after ``t`` observations for

- ``sgpts-cached``: :class:`~.policies.thompson.CachedSGPTS` (prior features of
  all arms computed once, kernel columns of the ``m`` inducing arms cached, rank-one
  ``q(u)`` statistics): ``O(N (M + m) + m^3)`` per step while the inducing set holds;
- ``exact-gpts-incremental``: :class:`~.policies.thompson.CachedExactGPTS`
  (the same prior features, one cached kernel column per observed arm, Cholesky factor
  grown by rows): ``O(N (M + t) + t^2)`` per step, ``O(N (M + t) + t^2)`` memory;
  past the memory budget the columns are recomputed at every step, ``O(N t d)``;
- ``sgpts``: :class:`~.policies.thompson.ModelSGPTS` (a
  :class:`~botorch_sketch.models.variational.DecomposedSamplingSVGP` rebuilt per
  step and a fresh feature basis per path: ``O((m + M) N d)`` to select, ``O(t m^2)``
  to update);
- ``exact-gpts``: :class:`~.policies.thompson.ModelExactGPTS` (a fresh
  ``SingleTaskGP`` per step and the same chunked pathwise argmax, ``O(t^3)``);
- ``exact-gpts-botorch``: the same model with BoTorch's own ``draw_matheron_paths``
  evaluated on the arms and an argmax.

Every method uses the problem's fixed kernel and noise and, at a given ``t``, starts
from the same random data and sees the same reward noise. Each run also reports the
step's flop count (the dominant matrix products and solves, :func:`step_flops`) as a
time at the measured throughput of the same products
(:func:`~.measurement.matmul_flops`) and the memory the sampler holds. The S-GP-TS
section of ``docs/benchmarks.md`` lists the targets and the measured figures.

Run ``python -m botorch_sketch.benchmarks thompson_steps --help``.

Modules: :mod:`~.steps` (timing and flop counts), :mod:`~.box` (one batch on the
continuous box), :mod:`~.report` (table, JSON), :mod:`~.figures` (PNG), :mod:`~.cli`.
"""

from botorch_sketch.benchmarks.policies.thompson import BoTorchPathGPTS
from botorch_sketch.benchmarks.thompson_steps.box import (
    format_box_report,
    time_box_batches,
)
from botorch_sketch.benchmarks.thompson_steps.cli import (
    FULL_SIZES,
    SMOKE_SIZES,
    build_parser,
    main,
)
from botorch_sketch.benchmarks.thompson_steps.figures import plot_step_times
from botorch_sketch.benchmarks.thompson_steps.report import (
    format_report,
    load_results,
    save_results,
)
from botorch_sketch.benchmarks.thompson_steps.steps import (
    BASELINE_OF,
    METHODS,
    StepTimings,
    measure_thompson_steps,
    step_flops,
    time_thompson_steps,
)

__all__ = [
    "BASELINE_OF",
    "FULL_SIZES",
    "METHODS",
    "SMOKE_SIZES",
    "BoTorchPathGPTS",
    "StepTimings",
    "build_parser",
    "format_box_report",
    "format_report",
    "load_results",
    "main",
    "measure_thompson_steps",
    "plot_step_times",
    "save_results",
    "step_flops",
    "time_box_batches",
    "time_thompson_steps",
]
