r"""GP-ThreDS: domain-shrinking Bayesian optimization (Salgia, Vakili and Zhao, 2021).

GP-ThreDS maximizes a noisy function over a box, mapped to the unit cube ``[0, 1]^d``.
It runs in epochs. Epoch ``k`` holds a set of cubes of edge ``2^{1-k}`` (initially the
whole cube) and a threshold ``tau``; local sequential tests
(:mod:`~botorch_sketch.generation.threds_local`), each with its own small exact GP,
classify the ``2^d`` sub-cubes (*leaves*) of every cube as high-performing (some point
above ``tau``) or not. The declared leaves become the next epoch's cubes, so the
search domain shrinks geometrically. The threshold follows a binary search on an
interval ``[a, b]`` believed to contain ``max f``: see :class:`ThresholdSearch`.

Mode ``"cube"`` (default) tests each cube once per epoch; mode ``"rwt"`` finds the
high-performing leaves with the paper's random walk on the tree
(:mod:`~botorch_sketch.generation.threds_walk`).

Extensions (not in the paper, off by default):

- ``reuse_observations=True``: every test starts from the run's earlier observations
  inside its box instead of the prior (the paper's tests discard them). On the paper's
  benchmarks this cuts the cumulative regret by 20-26% (Branin) and 60% (Rosenbrock);
  see ``docs/benchmarks.md``.
- ``readmit_after=m``: domain shrinking is irreversible, so a leaf declared by mistake
  while ``tau`` exceeds ``max f`` can trap the run in a sub-optimal region; ``m``
  failed epochs in a row restore the cubes of the epoch before the last refinement
  (one level up).

Saving: :meth:`GPThreDS.state_dict` holds the queries and observations so far. The
generator is a deterministic function of its options and observations (its only
random choices come from a ``torch.Generator`` seeded by ``seed``), so
:meth:`GPThreDS.load_state_dict` replays them on a freshly built generator, checks
that every replayed query equals the saved one, and only then swaps the result in.
Pickling and ``copy.deepcopy`` go through the same pair.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from torch import Tensor

from botorch_sketch.generation.options import (
    GPThreDSOptions,
    merged_options,
    options_record,
)
from botorch_sketch.generation.threds_geometry import (
    cube_grid,
    first_query_index,
    sub_cubes,
)
from botorch_sketch.generation.threds_local import LocalTest, threds_radius
from botorch_sketch.generation.threds_walk import WalkRequest, random_walk
from botorch_sketch.utils.fingerprint import check_saved_options
from botorch_sketch.utils.validation import (
    check_allocation,
    check_bounds,
    check_finite,
    check_int,
    check_kernel,
    check_magnitude,
    check_matrix,
    check_model_dtype,
    check_tensor,
)

#: Keys of :meth:`GPThreDS.state_dict`.
STATE_KEYS = ("X", "Y", "options")


@contextmanager
def _one_thread(device: torch.device) -> Iterator[None]:
    r"""Run CPU work on one intra-op thread, then restore the caller's setting.

    GP-ThreDS's tensors are small (one test's grid), so with several threads the
    synchronisation of every operation dominates: 10-30x slower per query on a busy
    2-core machine. The setting is process-wide while the block runs.
    """
    if device.type != "cpu":
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class ThresholdSearch:
    r"""The threshold search of GP-ThreDS over an interval ``[a, b]``.

    Start: ``[a, b] = f_range``, ``W0 = b - a``, ``k = 1``; always
    ``tau = (a + b) / 2``.
    After an epoch that declared a leaf (success): ``a <- tau - c 2^{-k} W0`` and
    ``k <- k + 1``. After one that declared nothing (``tau`` too high):
    ``[a, b] <- [a - (b - a) / 2, tau]``, i.e. the interval slides down by half its
    width, and ``k`` stays.

    Example:
        >>> search = ThresholdSearch((0.5, 1.2), c_coef=0.4)
        >>> search.update(success=True)
        >>> search.threshold  # 0.955
    """

    def __init__(self, f_range: tuple[float, float], c_coef: float) -> None:
        self.lower, self.upper = (float(v) for v in f_range)
        self.initial_width = self.upper - self.lower
        self.c_coef = float(c_coef)
        self.epoch = 1

    @property
    def threshold(self) -> float:
        return 0.5 * (self.lower + self.upper)

    def update(self, success: bool) -> None:
        r"""Move the interval after an epoch that succeeded (or not)."""
        tau = self.threshold
        if success:
            self.lower = tau - self.c_coef * 2.0**-self.epoch * self.initial_width
            self.epoch += 1
        else:
            self.lower -= 0.5 * (self.upper - self.lower)
            self.upper = tau


def default_threds_kernel(
    lengthscale: float = 0.2,
    outputscale: float = 1.0,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | None = None,
) -> ScaleKernel:
    r"""A fixed-hyperparameter ``ScaleKernel(RBFKernel())`` (defaults: the paper's).

    The values are set as tensors of ``dtype`` (GPyTorch stores them through a
    softplus, so a float32 round trip would perturb float64 values by ~1e-8).
    """
    factory = {"dtype": dtype, "device": device}
    kernel = ScaleKernel(RBFKernel()).to(**factory)
    kernel.base_kernel.lengthscale = torch.tensor(lengthscale, **factory)
    kernel.outputscale = torch.tensor(outputscale, **factory)
    return kernel.requires_grad_(False)


class GPThreDS:
    r"""Ask/tell generator for GP-ThreDS over a box.

    Each :meth:`ask` returns one point; :meth:`tell` feeds back its noisy value. The
    generator is lazy: the tree is never built beyond the current cubes, and nothing is
    queried that was not asked for, so a run of ``T`` asks makes exactly ``T`` queries
    (the budget may end a test midway). The kernel acts on unit-cube coordinates, so a
    lengthscale is a fraction of the box's width. On CPU the generator's own work runs
    on one intra-op thread (its tensors are small), restoring the caller's setting.

    State (read-only): :attr:`epoch` ``k``, :attr:`threshold` ``tau``,
    :attr:`interval` ``[a, b]``, :attr:`cubes` (in the user's bounds), :attr:`level`
    (cubes have edge ``2^{-level}`` of the box) and :attr:`current_test`.
    :meth:`state_dict` / :meth:`load_state_dict` resume a run exactly (see the module
    docstring); pickle and ``copy.deepcopy`` work when ``gamma`` does (e.g. a
    module-level function such as ``math.log``).

    Options: the box, ``covar_module`` and ``seed`` are arguments of the generator;
    every other setting is a field of :class:`GPThreDSOptions` (:attr:`options`),
    given as ``options=`` or as keyword overrides of its fields.

    Example:
        >>> bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
        >>> gen = GPThreDS(bounds, f_range=(0.5, 1.2))
        >>> gen = GPThreDS(bounds, GPThreDSOptions(f_range=(0.5, 1.2), mode="rwt"))
        >>> X, Y = gen.run(noisy_branin, 1000)
        >>> gen.epoch, gen.threshold, gen.cubes.shape
    """

    def __init__(
        self,
        bounds: Tensor,
        options: GPThreDSOptions | None = None,
        *,
        covar_module: Kernel | None = None,
        seed: int = 0,
        **overrides: Any,
    ) -> None:
        r"""Set up the first epoch (the whole box, ``tau`` the middle of ``f_range``).

        Args:
            bounds: ``2 x d`` box, lower < upper; its dtype and device are used.
            options: The generator's settings (:class:`GPThreDSOptions`, each field
                with its default and meaning; ``f_range`` is required).
            covar_module: GPyTorch kernel of the local GPs (copied; hyperparameters
                fixed). Default ``ScaleKernel(RBFKernel())``, lengthscale 0.2,
                outputscale 1.
            seed: Seeds the random first query of every test in mode ``"rwt"``
                (mode ``"cube"`` makes no random choice).
            **overrides: Fields of :class:`GPThreDSOptions` that replace those of
                ``options`` (e.g. ``GPThreDS(bounds, f_range=(0.5, 1.2))``).
        """
        check_model_dtype(bounds, "bounds")
        check_bounds(bounds, "bounds")
        check_magnitude(bounds, "bounds")
        options = merged_options(GPThreDSOptions, options, overrides, "GPThreDS")
        if covar_module is not None:
            check_kernel(covar_module)
        # A local test keeps ~32 numbers per grid point (its grid, the first rows
        # of its incremental GP, means, variances, bounds).
        check_allocation(
            32 * options.grid_points ** bounds.shape[-1], "`grid_points` ** d", bounds
        )
        check_int(seed, "seed", 0)
        #: The generator's options (frozen; :meth:`state_dict` saves them)
        self.options = options
        self.bounds = bounds
        self.dim = bounds.shape[-1]
        factory = {"dtype": bounds.dtype, "device": bounds.device}
        if covar_module is None:
            covar_module = default_threds_kernel(**factory)
        #: The local GPs' kernel (a copy, hyperparameters fixed)
        self.covar_module = (
            copy.deepcopy(covar_module).requires_grad_(False).to(**factory)
        )
        self.seed = seed
        # Unit-cube points (1 x d each) and values of every query so far.
        self._observed_X: list[Tensor] = []
        self._observed_Y: list[float] = []
        self._generator = torch.Generator().manual_seed(seed)
        self._previous_cubes: list[Tensor] = []  # one set per refinement
        self._failures = 0
        self._search = ThresholdSearch(options.f_range, options.c_coef)
        self._cubes = torch.stack(
            [bounds.new_zeros(self.dim), bounds.new_ones(self.dim)]
        )
        self._cubes = self._cubes.unsqueeze(0)
        self.level = 0
        self.num_queries = 0
        with _one_thread(bounds.device):
            self._start_epoch()

    # ----------------------------------------------------------------- inspection
    @property
    def epoch(self) -> int:
        return self._search.epoch

    @property
    def threshold(self) -> float:
        return self._search.threshold

    @property
    def interval(self) -> tuple[float, float]:
        return self._search.lower, self._search.upper

    @property
    def cubes(self) -> Tensor:
        r"""The current cubes, ``m x 2 x d`` in the user's bounds."""
        return self._to_user(self._cubes)

    @property
    def current_test(self) -> LocalTest:
        r"""The test in progress (its grid and boxes are in unit-cube coordinates)."""
        return self._test

    # ------------------------------------------------------------------ ask/tell
    def ask(self) -> Tensor:
        r"""Return the next query, ``1 x d`` in the user's bounds."""
        return self._to_user(self._test.next_point)

    def tell(self, X: Tensor, Y: Tensor) -> None:
        r"""Feed back the noisy value ``Y`` observed at ``X = ask()``.

        Args:
            X: ``1 x d``, the point returned by the last :meth:`ask`.
            Y: Its observation: one finite value (shape ``()``, ``1`` or ``1 x 1``).
        """
        check_tensor(X, "X")
        check_tensor(Y, "Y")
        if X.shape != (1, self.dim):
            raise ValueError(
                f"`X` must have shape 1 x {self.dim}, got {tuple(X.shape)}."
            )
        if Y.numel() != 1 or Y.dim() > 2:
            raise ValueError(f"`Y` must hold one value, got shape {tuple(Y.shape)}.")
        check_finite(Y, "Y")
        if not self._is_next_query(X):
            raise ValueError("`X` must be the point returned by the last ask().")
        self._observe(float(Y))

    def best(self) -> tuple[Tensor, float]:
        r"""The query with the largest observed value (``d``, in the user's bounds)
        and that value; GP-ThreDS maximizes, and of equal values the earliest wins.
        """
        if not self._observed_Y:
            raise ValueError("No value has been told yet: best() needs one tell(X, Y).")
        position = max(range(len(self._observed_Y)), key=self._observed_Y.__getitem__)
        point = self._to_user(self._observed_X[position]).squeeze(0)
        return point, self._observed_Y[position]

    def state_dict(self) -> dict[str, Tensor]:
        r"""Everything needed to resume the run exactly (copies).

        Returns:
            ``{"X": T x d queries (the user's bounds), "Y": T observations,
            "options": the options as a plain dict}``, ``T`` the number of queries
            so far (``T = 0`` before the first ``tell``).
        """
        if self._observed_X:
            X = self._to_user(torch.cat(self._observed_X))
        else:
            X = self.bounds.new_empty(0, self.dim)
        return {
            "X": X,
            "Y": self.bounds.new_tensor(self._observed_Y),
            "options": options_record(self.options),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        r"""Resume from :meth:`state_dict`, atomically.

        A generator built with this one's options replays the saved observations
        (about the cost of the run so far); every replayed query must equal the
        saved one, which a state saved with other bounds, options or ``seed`` fails.
        Only a fully replayed state replaces this generator's: a rejected one leaves
        it unchanged.

        Args:
            state: A :meth:`state_dict` of a generator with the same options.

        Raises:
            TypeError: ``state`` is not a mapping or a value is not a floating-point
                tensor (the message names the key).
            ValueError: A key is missing or unknown, a value has the wrong shape or
                non-finite entries, or a saved query differs from the replayed one.
        """
        X, Y = _check_state(state, self.dim)
        check_saved_options(state["options"], options_record(self.options))
        fresh = self._fresh()
        for t, (x, y) in enumerate(zip(X, Y.tolist(), strict=True)):
            if not fresh._is_next_query(x.unsqueeze(0)):
                raise ValueError(
                    f"`state['X']` row {t} is not this generator's query {t}: the "
                    "state was saved by a GPThreDS with other bounds, options or seed."
                )
            fresh._observe(y)
        self.__dict__ = fresh.__dict__

    def __getstate__(self) -> dict[str, Any]:
        r"""Pickle (and deep-copy) as the options plus :meth:`state_dict`: the epoch's
        Python generator and the ``torch.Generator`` cannot be pickled themselves."""
        return {
            "bounds": self.bounds,
            "options": self.options,
            "covar_module": self.covar_module,
            "seed": self.seed,
            "state": self.state_dict(),
        }

    def __setstate__(self, saved: dict[str, Any]) -> None:
        built = {key: value for key, value in saved.items() if key != "state"}
        GPThreDS.__init__(self, **built)
        self.load_state_dict(saved["state"])

    def _fresh(self) -> GPThreDS:
        r"""A generator built as this one was, before any query."""
        return type(self)(
            self.bounds, self.options, covar_module=self.covar_module, seed=self.seed
        )

    def run(self, f: Callable[[Tensor], Tensor], T: int) -> tuple[Tensor, Tensor]:
        r"""Make exactly ``T`` more queries of ``f``.

        Args:
            f: Maps a ``1 x d`` point to one noisy value (a tensor or a float).
            T: Number of queries (``>= 1``).

        Returns:
            ``(X, Y)``: the ``T x d`` queries and their ``T`` observations.
        """
        check_int(T, "T", 1)
        X = self.bounds.new_empty(T, self.dim)
        Y = self.bounds.new_empty(T)
        for t in range(T):
            x = self.ask()
            y = torch.as_tensor(f(x), dtype=X.dtype, device=X.device)
            self.tell(x, y)
            X[t], Y[t] = x[0], y.reshape(())
        return X, Y

    def _is_next_query(self, X: Tensor) -> bool:
        r"""Whether the ``1 x d`` point ``X`` is :meth:`ask`'s, up to rounding."""
        expected = self.ask()
        width = self.bounds[1] - self.bounds[0]
        slack = 1e-6 * width + 8 * torch.finfo(X.dtype).eps * expected.abs()
        return bool(((X.to(expected) - expected).abs() <= slack).all())

    def _observe(self, value: float) -> None:
        r"""Record ``value`` observed at the next query and move the test on.

        Atomic: if anything raises on the way (e.g. ``gamma`` returning NaN), the
        generator is rebuilt from the earlier observations, exactly as it was before
        the call, and the exception propagates; a retry then continues the run.
        """
        self._observed_X.append(self._test.next_point)
        self._observed_Y.append(value)
        try:
            with _one_thread(self.bounds.device):
                self._test.observe(value)
                self.num_queries += 1
                if self._test.finished:
                    self._next_test()
        except BaseException:
            self.__dict__ = self._replayed(self._observed_Y[:-1]).__dict__
            raise

    def _replayed(self, values: list[float]) -> GPThreDS:
        r"""A fresh generator with these options that observed ``values`` at its
        successive queries."""
        fresh = self._fresh()
        for value in values:
            fresh._observe(value)
        return fresh

    # ------------------------------------------------------------------ epochs
    def _start_epoch(self) -> None:
        cube = self.options.mode == "cube"
        epoch = self._cube_epoch() if cube else self._walk_epoch()
        self._epoch_tests = epoch
        self._test = next(epoch)

    def _next_test(self) -> None:
        try:
            self._test = next(self._epoch_tests)
        except StopIteration as stop:
            self._end_epoch(*stop.value)
            self._start_epoch()

    def _end_epoch(self, leaves: Tensor, parents: Tensor) -> None:
        r"""Update the cubes and the threshold from the declared leaves.

        Args:
            leaves: ``j x 2 x d`` declared leaves, in order of declaration.
            parents: ``j`` indices of their cubes in the current cubes.
        """
        success = leaves.shape[0] > 0
        self._failures = 0 if success else self._failures + 1
        if success:
            depth = self.options.max_depth
            if depth is None or self.level < depth:
                if self.options.readmit_after is not None:
                    self._previous_cubes.append(self._cubes)
                self._cubes, self.level = leaves, self.level + 1
            else:
                keep = torch.zeros(self._cubes.shape[0], dtype=torch.bool)
                keep[parents] = True
                self._cubes = self._cubes[keep.to(self._cubes.device)]
        elif self._previous_cubes and self._failures == self.options.readmit_after:
            self._cubes, self.level = self._previous_cubes.pop(), self.level - 1
            self._failures = 0
        self._search.update(success)

    def _cube_epoch(self) -> Generator[LocalTest, None, tuple[Tensor, Tensor]]:
        r"""Mode "cube": one test per cube; returns the declared leaves and parents."""
        declared, parents = [], []
        first = first_query_index(self.options.grid_points, self.dim)
        for i, cube in enumerate(self._cubes):
            grid, leaf = cube_grid(cube, self.options.grid_points)
            delta = self.options.delta
            test = self._make_test(grid, leaf, 2**self.dim, cube, first, delta)
            yield test
            leaves = sub_cubes(cube.unsqueeze(0))[0]
            declared += [leaves[j] for j in test.declared]
            parents += [i] * len(test.declared)
        return self._stack(declared), torch.tensor(parents, dtype=torch.long)

    def _walk_epoch(self) -> Generator[LocalTest, None, tuple[Tensor, Tensor]]:
        r"""Mode "rwt": the random walk; returns the declared leaves and parents."""
        num_leaves = 2**self.dim
        leaves = sub_cubes(self._cubes).reshape(-1, 2, self.dim)
        grids = [cube_grid(cube, self.options.grid_points) for cube in self._cubes]
        points = torch.cat([grid for grid, _ in grids])
        point_leaf = torch.cat(
            [leaf + i * num_leaves for i, (_, leaf) in enumerate(grids)]
        )
        walk = random_walk(leaves)
        try:
            request = next(walk)
            while True:
                test = self._walk_test(request, points, point_leaf)
                yield test
                request = walk.send(not test.stopped)
        except StopIteration as stop:
            chosen = stop.value.nonzero().squeeze(-1).cpu()
        return leaves[chosen.to(leaves.device)], chosen // num_leaves

    def _walk_test(
        self, request: WalkRequest, points: Tensor, point_leaf: Tensor
    ) -> LocalTest:
        grid = points[request.leaves[point_leaf]]
        # A random first query: a fixed one (e.g. the node's centre) decides most tests
        # alone when the prior UCB is below tau, and the walk then cycles for ever.
        first = int(torch.randint(grid.shape[0], (1,), generator=self._generator))
        options = self.options
        delta = options.walk_delta if request.kind == "child" else options.delta
        group = torch.zeros(grid.shape[0], dtype=torch.long, device=grid.device)
        return self._make_test(grid, group, 1, request.box, first, delta)

    def _make_test(
        self,
        grid: Tensor,
        group: Tensor,
        num_groups: int,
        box: Tensor,
        first_index: int,
        delta: float,
    ) -> LocalTest:
        options = self.options
        bound, noise_std, gamma = options.rkhs_bound, options.noise_std, options.gamma
        reused_X, reused_Y = self._observations_inside(box)
        return LocalTest(
            grid,
            group,
            num_groups,
            box,
            threshold=self.threshold,
            tolerance=options.tol_coef * float((box[1] - box[0]).max()),
            radius=lambda n: threds_radius(n, bound, noise_std, delta, gamma),
            kernel=self.covar_module,
            noise=float(options.noise),
            cap=options.cap,
            first_index=first_index,
            reused_X=reused_X,
            reused_Y=reused_Y,
        )

    def _observations_inside(self, box: Tensor) -> tuple[Tensor | None, Tensor | None]:
        r"""Earlier observations in the closed ``box`` (unit cube), when reused."""
        if not self.options.reuse_observations or not self._observed_X:
            return None, None
        X = torch.cat(self._observed_X)
        Y = X.new_tensor(self._observed_Y)
        # Grid points on a face may be off by rounding: a slack of 1e-9 of the cube.
        inside = ((X >= box[0] - 1e-9) & (X <= box[1] + 1e-9)).all(dim=-1)
        return X[inside], Y[inside]

    # ------------------------------------------------------------------ helpers
    def _to_user(self, unit: Tensor) -> Tensor:
        return self.bounds[0] + unit * (self.bounds[1] - self.bounds[0])

    def _stack(self, boxes: list[Tensor]) -> Tensor:
        if boxes:
            return torch.stack(boxes)
        return self.bounds.new_empty(0, 2, self.dim)


def _check_state(state: object, dim: int) -> tuple[Tensor, Tensor]:
    r"""Validate a :meth:`GPThreDS.state_dict`; return its ``(X, Y)``, detached."""
    if not isinstance(state, Mapping):
        raise TypeError(f"`state` must be a mapping, got {type(state).__name__}.")
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise ValueError(f"`state` lacks the key(s) {missing}.")
    unknown = sorted(str(key) for key in state if key not in STATE_KEYS)
    if unknown:
        raise ValueError(f"`state` has unknown key(s) {unknown}.")
    X = check_matrix(state["X"], "state['X']", num_cols=dim, allow_empty=True)
    Y = check_finite(state["Y"], "state['Y']")
    if Y.shape != X.shape[:1]:
        raise ValueError(
            f"`state['Y']` must have shape ({X.shape[0]},) like the rows of "
            f"`state['X']`, got {tuple(Y.shape)}."
        )
    return X.detach(), Y.detach()
