r"""Policy registry: names -> lazily imported policy classes, with keyword options.

Policy modules are imported only when a policy is built, so a module that is missing
or fails to import makes only its own policies unavailable (:func:`policy_status`
says why) instead of breaking the CLI. Options are the policy constructor's keyword
arguments; unknown names are rejected with the accepted list.

Example:
    >>> policy = make_policy("exact-ucb", {"radius": 2.0})
    >>> key, value = parse_option("radius=2")
    >>> register_policy("mine", "my_package.policies", "MyPolicy", "my policy")
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from botorch_sketch.benchmarks.policies.base import Policy


@dataclass(frozen=True)
class PolicyEntry:
    r"""Where a registered policy lives.

    Attributes:
        module: Importable module path.
        attribute: Class (or factory) name in that module.
        description: One line for ``--list``.
    """

    module: str
    attribute: str
    description: str


_POLICIES = "botorch_sketch.benchmarks.policies"

#: All registered policies, by name.
REGISTRY: dict[str, PolicyEntry] = {
    "bbkb": PolicyEntry(f"{_POLICIES}.bkb", "BBKBPolicy", "BBKB adaptive batches"),
    "bkb": PolicyEntry(f"{_POLICIES}.bkb", "BKBPolicy", "BKB (Nystrom GP-UCB)"),
    "exact-ucb": PolicyEntry(
        f"{_POLICIES}.baselines", "ExactUCBPolicy", "exact GP-UCB, O(A t) updates"
    ),
    "botorch-ucb": PolicyEntry(
        f"{_POLICIES}.baselines",
        "BoTorchUCBPolicy",
        "exact GP-UCB as a plain BoTorch loop (refit every step)",
    ),
    "exact-bucb": PolicyEntry(
        f"{_POLICIES}.baselines", "ExactBUCBPolicy", "exact GP-BUCB / GP-AUCB batches"
    ),
    "uniform": PolicyEntry(f"{_POLICIES}.baselines", "UniformPolicy", "uniform"),
    "epsilon-greedy": PolicyEntry(
        f"{_POLICIES}.baselines", "EpsilonGreedyPolicy", "epsilon-greedy"
    ),
    "sgpts": PolicyEntry(f"{_POLICIES}.thompson", "SGPTSPolicy", "S-GP-TS"),
    "exact-gpts": PolicyEntry(
        f"{_POLICIES}.thompson", "ExactGPTSPolicy", "exact GP Thompson sampling"
    ),
    "sgpts-cached": PolicyEntry(
        f"{_POLICIES}.thompson", "CachedSGPTSPolicy", "S-GP-TS, cached (finite arms)"
    ),
    "exact-gpts-incremental": PolicyEntry(
        f"{_POLICIES}.thompson",
        "IncrementalExactGPTSPolicy",
        "exact GP-TS, O(N (M + t)) incremental (finite arms)",
    ),
    "gp-threds": PolicyEntry(f"{_POLICIES}.threds", "GPThreDSPolicy", "GP-ThreDS"),
    "igp-ucb": PolicyEntry(
        f"{_POLICIES}.threds", "IGPUCBGridPolicy", "IGP-UCB on a growing grid"
    ),
    "igp-ucb-incremental": PolicyEntry(
        f"{_POLICIES}.threds",
        "IncrementalIGPUCBGridPolicy",
        "IGP-UCB on a growing grid, O(A t) incremental updates",
    ),
}


class PolicyUnavailableError(ImportError):
    r"""The policy's module (or class) cannot be imported."""


def register_policy(name: str, module: str, attribute: str, description: str) -> None:
    r"""Add (or replace) a policy; ``module.attribute`` must accept keyword options."""
    if not name or any(ch in name for ch in ",:= "):
        raise ValueError(f"`name` must be non-empty without ',:= ', got {name!r}.")
    REGISTRY[name] = PolicyEntry(module, attribute, description)


def _entry(name: str) -> PolicyEntry:
    if name not in REGISTRY:
        raise ValueError(f"Unknown policy {name!r}; known: {sorted(REGISTRY)}.")
    return REGISTRY[name]


def policy_class(name: str) -> Callable[..., Policy]:
    r"""Import and return the class registered as ``name``.

    Raises:
        PolicyUnavailableError: The module or attribute is missing or fails to import.
    """
    entry = _entry(name)
    try:
        module = importlib.import_module(entry.module)
    except ImportError as error:
        missing = isinstance(error, ModuleNotFoundError) and error.name == entry.module
        reason = "does not exist (yet)" if missing else f"import failed: {error}"
        raise PolicyUnavailableError(f"{name}: {entry.module} {reason}") from error
    try:
        return getattr(module, entry.attribute)
    except AttributeError as error:
        raise PolicyUnavailableError(
            f"{name}: {entry.module} has no {entry.attribute}"
        ) from error


def policy_status(name: str) -> str | None:
    r"""None if ``name`` can be built, else the reason it cannot."""
    try:
        policy_class(name)
    except PolicyUnavailableError as error:
        return str(error)
    return None


def policy_options(name: str) -> dict[str, object]:
    r"""Keyword options of the policy's constructor with their defaults."""
    parameters = inspect.signature(policy_class(name)).parameters
    return {
        key: (None if p.default is inspect.Parameter.empty else p.default)
        for key, p in parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def make_policy(name: str, options: Mapping[str, object] | None = None) -> Policy:
    r"""Build the policy ``name`` with keyword ``options``.

    Raises:
        ValueError: Unknown policy or option names (the accepted names are listed).
        PolicyUnavailableError: Its module cannot be imported.
    """
    options = dict(options or {})
    accepted = policy_options(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Policy {name!r} has no option(s) {unknown}; accepted: {sorted(accepted)}."
        )
    policy = policy_class(name)(**options)
    if not isinstance(policy, Policy):
        raise TypeError(f"{name!r} built a {type(policy).__name__}, not a Policy.")
    return policy


def parse_value(text: str) -> object:
    r"""Parse an option value: int, float, bool, None, a comma list, or a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    if "," in text:
        return tuple(parse_value(part) for part in text.split(","))
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_option(text: str) -> tuple[str | None, str, object]:
    r"""Parse ``[target:]key=value`` into ``(target, key, value)``.

    ``target`` (a policy label or name) is None when the option applies to every
    policy that accepts ``key``.
    """
    head, sep, value = text.partition("=")
    if not sep or not head:
        raise ValueError(f"Option {text!r} must look like [policy:]key=value.")
    target, colon, key = head.rpartition(":")
    if not key.isidentifier():
        raise ValueError(f"Option {text!r}: {key!r} is not a valid option name.")
    return (target if colon else None), key, parse_value(value)


@dataclass(frozen=True)
class PerHorizon:
    r"""An option value computed from the horizon ``T``, e.g. ``delta = 1/T``.

    Attributes:
        function: Maps ``T`` to the value.
        text: How to print it (e.g. ``"1/T"``).
    """

    function: Callable[[int], object]
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class PolicyConfig:
    r"""A policy to run: registry ``name``, table ``label`` and keyword ``options``.

    :class:`PerHorizon` option values are resolved by :meth:`resolved_options`.
    """

    name: str
    label: str = ""
    options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _entry(self.name)
        if not self.label:
            object.__setattr__(self, "label", self.name)

    def resolved_options(self, horizon: int) -> dict[str, object]:
        return {
            key: value.function(horizon) if isinstance(value, PerHorizon) else value
            for key, value in self.options.items()
        }

    def with_options(self, options: Mapping[str, object]) -> PolicyConfig:
        return PolicyConfig(self.name, self.label, {**self.options, **options})

    def build(self, horizon: int) -> Policy:
        return make_policy(self.name, self.resolved_options(horizon))
