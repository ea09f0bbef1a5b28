r"""Integrations with other tools: Ax, Ray Tune and Optuna.

Each needs its extra (``ax``, ``ray``, ``optuna``), so the names below are imported
on first use: importing this package imports none of those tools, and a name whose
tool is missing raises the ``ImportError`` that names the extra.
"""

from __future__ import annotations

from botorch_sketch.utils.lazy_exports import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "ArmSpace": "ray_tune",
    "BBKBSampler": "optuna",
    "BBKBSearch": "ray_tune",
    "SGPTSSampler": "optuna",
    "SGPTSSearch": "ray_tune",
    "bbkb_batch_in_model_space": "ax",
    "bkb_generation_strategy": "ax",
    "next_bbkb_batch_size": "ax",
    "sgpts_generation_strategy": "ax",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
