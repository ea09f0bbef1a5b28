r"""OptunaHub package of botorch-sketch: the samplers ``BBKBSampler`` (asynchronous
batched budgeted kernelized bandits) and ``SGPTSSampler`` (asynchronous sparse
Gaussian-process Thompson sampling).

This folder is what goes to optunahub-registry as ``package/samplers/botorch_sketch/``;
the samplers themselves live in the installed ``botorch_sketch`` package, which this
module re-exports.
"""

from botorch_sketch.integrations.optuna import BBKBSampler, SGPTSSampler

__all__ = ["BBKBSampler", "SGPTSSampler"]
