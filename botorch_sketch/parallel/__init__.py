r"""Run an ask/tell optimizer on a finite arm set with evaluations in parallel.

:func:`run_parallel` keeps up to ``num_workers`` evaluations of an objective in flight
on an execution engine, hands each result to the optimizer as soon as it arrives and
asks for new arms as workers free up:

- any :class:`concurrent.futures.Executor` (threads, processes):
  :class:`ExecutorEngine`;
- a Dask ``distributed.Client``: :class:`DaskEngine`;
- Ray remote tasks: :class:`RayEngine`;
- a simulated clock (evaluation times given, nothing sleeps; the cluster
  benchmark): :class:`SimulatedEngine`.

The engines differ only in how they submit a call, wait for the first results (with
a timeout) and cancel; the loop itself (:func:`run_parallel`) is shared. The
optimizer is anything with the
:class:`~botorch_sketch.generation.ask_tell.AskTellOptimizer` interface, e.g.
:class:`~botorch_sketch.generation.bbkb_loop.BBKB` (asynchronous batches: ``ask`` may
return no arm while the batch rule waits for outcomes; build it with
``**asynchronous_options(num_workers)`` for the workers at hand) or
:class:`~botorch_sketch.generation.sgpts_loop.SGPTS`.

A worker exception (``SystemExit`` and ``KeyboardInterrupt`` raised by the objective
included), a result that is not a finite real number (a string or a bool is not), or
no result within
``evaluation_timeout`` seconds marks the arm as failed (``optimizer.fail``) and is
logged with the arm; the run goes on. ``total_timeout`` ends the run with what has
been collected. With a ``checkpoint`` file the optimizer's state and the evaluation
log are saved after every round of results, when the run times out and when it is
interrupted (``KeyboardInterrupt`` or any error); a later call with the same file
resumes, re-submitting the arms that were still pending. A Ctrl-C (SIGINT) that
arrives while the driver updates the optimizer, the log or the file takes effect once
the update is complete, so the saved state is never half-updated.

Ray and Dask are optional (``pip install -e ".[distributed]"`` from the repository
root) and are imported only when their engine is built.
"""

from botorch_sketch.parallel.checkpoints import load_checkpoint, save_checkpoint
from botorch_sketch.parallel.driver import run_parallel
from botorch_sketch.parallel.engines import (
    DaskEngine,
    Engine,
    EvaluationInterrupted,
    ExecutorEngine,
    RayEngine,
    SimulatedEngine,
    as_engine,
)
from botorch_sketch.parallel.log import EvaluationError, EvaluationLog

__all__ = [
    "DaskEngine",
    "Engine",
    "EvaluationError",
    "EvaluationInterrupted",
    "EvaluationLog",
    "ExecutorEngine",
    "RayEngine",
    "SimulatedEngine",
    "as_engine",
    "load_checkpoint",
    "run_parallel",
    "save_checkpoint",
]
