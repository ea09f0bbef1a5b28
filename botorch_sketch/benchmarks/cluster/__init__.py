r"""A simulated cluster: ask/tell bandits on ``W`` workers with random evaluation times.

Every evaluation takes a log-normal time (mean ``duration_mean``, log-standard
deviation ``duration_sigma``); :func:`~botorch_sketch.parallel.run_parallel` drives
the method on a :class:`~botorch_sketch.parallel.SimulatedEngine`: time is simulated,
nothing sleeps. Whenever workers are free (and the horizon ``T`` is not yet handed
out), the method is asked for at most that many arms; it may return fewer or none
("wait for outcomes").
Then the next evaluation completes, the clock jumps to its end and its noisy reward is
told to the method. Run seed ``s`` gives the method ``torch.Generator().manual_seed(2
s)`` and the evaluation times and reward noise of the ``k``-th started evaluation
``manual_seed(2 s + 1)``, so all methods see common random numbers.

Recorded as a :class:`~botorch_sketch.benchmarks.results.RunTrace` (the cluster's
records in its ``diagnostics`` and ``metadata``, see :mod:`~.report`), per completed
evaluation ``k = 1..T`` (in completion order): the simulated
time, the arm's noiseless value and the busy worker-time so far; per run, the measured
time the method spent in ``ask`` and ``tell`` and the floating-point work it
counted (BBKB, GP-BUCB). Derived: the regret ratio
``R_k / (k r_unif)`` (Calandriello et al., ICML 2020) and simple regret against
simulated time, the utilization ``busy worker-time / (W x makespan)``, the
utilization until the last start (the same up to the time ``t_s`` the ``T``-th
evaluation started: after it no method has work for a free worker, so the straggler
tail that the first includes is the workload's, not the method's) and the
optimizer's time per suggestion (the process's CPU time in ``ask`` + ``tell`` over
``T``, with wall-clock time alongside; not charged to the simulated clock).

Methods (:data:`METHODS`), all on the problem's fixed kernel with the constant radius 1
on the Bayesian scale (``bayes_radius = 1``) of the other benchmarks:

- ``bkb``: sequential BKB (:class:`~botorch_sketch.BBKB` with ``ratio_threshold=1``):
  one arm at a time, so one worker is busy;
- ``bbkb-sync``: synchronous BBKB: a batch (at most ``W`` arms) is asked when all
  workers are idle and told when all its evaluations are back;
- ``bbkb-async``: asynchronous BBKB: ``ask(free workers)`` after every completion;
  pending arms enter by the hallucinated variance update and BBKB's rule may answer
  "wait" (no arms); settings :func:`~botorch_sketch.generation.bbkb_loop.
  asynchronous_options` of ``W`` (``C~ = 1 + 0.07 W v`` unless given);
- ``gp-bucb``: GP-BUCB with fixed batches of ``W`` (Desautels et al., JMLR 2014) on
  the exact posterior, synchronous (:class:`~.policies.baselines.ExactBUCB`:
  ``O(A t)`` per evaluation, ``O(A T)`` memory);
- ``sgpts-async``: asynchronous S-GP-TS (:class:`~botorch_sketch.generation.sgpts_loop.
  SGPTS`, ``m = 100``, ``M = 1000``, single-precision feature cache), a fresh path per
  free worker;
- ``gpts-async``: asynchronous exact GP-TS, the same with the exact posterior
  (:class:`~botorch_sketch.generation.sgpts_loop.ExactGPTS`: ``O(A (M + t) + t^2)``
  per path, ``O(A t)`` memory),
  the exact baseline of ``sgpts-async``;
- ``uniform``: uniformly random arms on every free worker.

Run ``python -m botorch_sketch.benchmarks.cluster --preset cluster-smoke`` (seconds),
``--preset cluster-cadata --data-dir DATA`` or ``--preset cluster-rosenbrock``
(also ``botorch-sketch-bench cluster ...``).

Modules: :mod:`~.methods` (the methods and their builders), :mod:`~.simulation`
(the run on the simulated clock), :mod:`~.report` (a run's cluster quantities,
figures of merit and the table), :mod:`~.figures` (PNGs), :mod:`~.cli` (presets,
command line).
"""

from botorch_sketch.benchmarks.cluster.cli import PRESETS, ClusterPreset, main
from botorch_sketch.benchmarks.cluster.figures import plot, plot_tradeoff
from botorch_sketch.benchmarks.cluster.methods import (
    METHODS,
    ClusterMethod,
    MethodSetup,
    label,
    method_label,
)
from botorch_sketch.benchmarks.cluster.report import (
    busy_fraction,
    format_markdown,
    makespan,
    run_json,
    run_summary,
    summarize,
    time_to_find,
    time_to_reach,
    utilization,
    utilization_until_last_start,
    value_on_grid,
)
from botorch_sketch.benchmarks.cluster.simulation import simulate
from botorch_sketch.generation.sgpts_loop import ExactGPTS

__all__ = [
    "METHODS",
    "PRESETS",
    "ClusterMethod",
    "ClusterPreset",
    "ExactGPTS",
    "MethodSetup",
    "busy_fraction",
    "format_markdown",
    "label",
    "main",
    "makespan",
    "method_label",
    "plot",
    "plot_tradeoff",
    "run_json",
    "run_summary",
    "simulate",
    "summarize",
    "time_to_find",
    "time_to_reach",
    "utilization",
    "utilization_until_last_start",
    "value_on_grid",
]
