r"""Per-step wall time of S-GP-TS against exact GP-TS on S-GP-TS's Hartmann-6.

One Thompson step (``q = 1``) draws one sample path with ``M`` random Fourier
features, takes its argmax over ``N`` candidate arms and conditions on the new noisy
observation. :func:`measure_thompson_steps` times such steps after ``t`` observations
for ``sgpts-cached`` (:class:`~.policies.thompson.CachedSGPTS`) and
``exact-gpts-incremental`` (:class:`~.policies.thompson.CachedExactGPTS`), from the
same random data and reward noise, with each step's flop count (:func:`step_flops`)
and the memory the sampler holds; :func:`time_box_batches` times one batch on the
continuous box. The S-GP-TS section of ``docs/benchmarks.md`` lists the measured
figures. Run ``python -m benchmarks thompson_steps --help``.
"""

from benchmarks.thompson_steps.cli import (
    FULL_SIZES,
    SMOKE_SIZES,
    build_parser,
    main,
)
from benchmarks.thompson_steps.report import (
    format_box_report,
    format_report,
    load_results,
    plot_step_times,
    save_results,
)
from benchmarks.thompson_steps.steps import (
    BASELINE_OF,
    METHODS,
    StepTimings,
    measure_thompson_steps,
    step_flops,
    time_box_batches,
    time_thompson_steps,
)

__all__ = [
    "BASELINE_OF",
    "FULL_SIZES",
    "METHODS",
    "SMOKE_SIZES",
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
