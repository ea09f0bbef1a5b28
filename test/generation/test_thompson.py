import pytest
import torch

from botorch_sketch.acquisition.thompson import AlphaSchedule
from botorch_sketch.generation.thompson import gen_thompson_candidates
from botorch_sketch.sampling.pathwise import draw_scaled_paths

from ..gp_helpers import (
    DTYPE,
    assert_close,
    rbf_kernel,
    seeded,
    sine_data,
    transformed_exact_gp,
    transformed_svgp,
    uniform,
)

BOUNDS = torch.tensor([[0.0, 0.0], [2.0, 2.0]], dtype=DTYPE)


def _data(dtype=DTYPE, device=None):
    return sine_data(50, dtype=dtype, scale=2.0, frequency=4.0, device=device)


def _svgp(dtype=DTYPE, device=None):
    X, Y = _data(dtype=dtype, device=device)
    return transformed_svgp(X, Y, 12, rbf_kernel(0.25, dtype=dtype, device=device))


def _exact(dtype=DTYPE, device=None):
    X, Y = _data(dtype=dtype, device=device)
    return transformed_exact_gp(X, Y, rbf_kernel(0.25, dtype=dtype, device=device))


MODELS = {"svgp": _svgp, "exact": _exact}


def _choices(n=5000, dtype=DTYPE, seed=3, device=None):
    return uniform(n, 2, seed=seed, scale=2.0, dtype=dtype, device=device)


@pytest.mark.parametrize("name", MODELS)
def test_discrete_chunked_argmax_equals_brute_force(name, tkwargs):
    model, choices = MODELS[name](**tkwargs), _choices(**tkwargs)
    result = gen_thompson_candidates(
        model,
        4,
        choices=choices,
        num_features=256,
        generator=seeded(1),
        chunk_size=333,
    )
    paths = draw_scaled_paths(model, 4, num_features=256, generator=seeded(1))
    with torch.no_grad():
        brute_values, brute_index = paths(choices).max(dim=-1)
    assert torch.equal(result.indices, brute_index)
    assert torch.equal(result.candidates, choices[brute_index])
    assert_close(result.values, brute_values)


def test_alpha_zero_picks_the_posterior_mean_argmax(tkwargs):
    model, choices = _svgp(**tkwargs), _choices(**tkwargs)
    result = gen_thompson_candidates(model, 3, choices=choices, alpha=0.0)
    with torch.no_grad():
        mean = model.posterior(choices).mean.squeeze(-1)
    best = int(mean.argmax())
    assert result.indices.tolist() == [best] * 3
    assert_close(result.values, mean[best].expand(3))


def test_alpha_schedule_is_evaluated_at_the_next_step():
    model, seen = _svgp(), []

    def schedule(t):
        seen.append(t)
        return AlphaSchedule(scale=0.1)(t)

    gen_thompson_candidates(model, 2, choices=_choices(100), alpha=schedule)
    assert seen == [51]


@pytest.mark.filterwarnings("ignore::botorch.exceptions.warnings.OptimizationWarning")
@pytest.mark.parametrize("name", MODELS)
def test_box_candidates_maximize_each_path(name, tkwargs):
    model, bounds = MODELS[name](**tkwargs), BOUNDS.to(**tkwargs)
    result = gen_thompson_candidates(
        model,
        3,
        bounds=bounds,
        num_features=256,
        generator=seeded(2),
        raw_samples=1024,
        num_restarts=5,
    )
    assert result.indices is None and result.candidates.shape == (3, 2)
    assert result.candidates.dtype == tkwargs["dtype"]
    assert ((result.candidates >= 0) & (result.candidates <= 2)).all()
    paths = draw_scaled_paths(model, 3, num_features=256, generator=seeded(2))
    grid = torch.linspace(0, 2, 201, **tkwargs)
    grid = torch.cartesian_prod(grid, grid)
    with torch.no_grad():
        grid_best = paths(grid).max(dim=-1).values
        at_candidates = paths.paired(result.candidates.unsqueeze(0)).squeeze(0)
    assert_close(result.values, at_candidates)
    # Up to 1e-6 and a few roundings of the values (~3) in the dtype.
    eps = torch.finfo(tkwargs["dtype"]).eps
    assert (result.values >= grid_best - 1e-6 - 10 * eps * grid_best.abs()).all()


def test_bad_inputs_raise():
    model, choices = _svgp(), _choices(20)
    with pytest.raises(ValueError, match="exactly one"):
        gen_thompson_candidates(model, 1)
    with pytest.raises(ValueError, match="exactly one"):
        gen_thompson_candidates(model, 1, choices=choices, bounds=BOUNDS)
    with pytest.raises(ValueError, match="q"):
        gen_thompson_candidates(model, 0, choices=choices)
    with pytest.raises(ValueError, match="choices"):
        gen_thompson_candidates(model, 1, choices=torch.rand(5, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="choices"):
        gen_thompson_candidates(model, 1, choices=choices[:0])
    with pytest.raises(ValueError, match="bounds"):
        gen_thompson_candidates(model, 1, bounds=BOUNDS.flip(0))
    with pytest.raises(ValueError, match="bounds"):
        gen_thompson_candidates(model, 1, bounds=torch.zeros(2, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="raw_samples"):
        gen_thompson_candidates(model, 1, bounds=BOUNDS, raw_samples=0)
    with pytest.raises(ValueError, match="chunk_size"):
        gen_thompson_candidates(model, 1, choices=choices, chunk_size=0)
    with pytest.raises(ValueError, match="alpha"):
        gen_thompson_candidates(model, 1, choices=choices, alpha=-2.0)


def test_bad_arguments_are_named():
    # Issue 14 item 9: wrong model types, seeds, flags and absurd choices raise
    # ValueError/TypeError naming the argument.
    model, choices = _svgp(), _choices(20)
    with pytest.raises(TypeError, match="`model`"):
        gen_thompson_candidates("model", 1, choices=choices)
    with pytest.raises(TypeError, match="`q`"):
        gen_thompson_candidates(model, True, choices=choices)
    with pytest.raises(TypeError, match="`generator`"):
        gen_thompson_candidates(model, 1, choices=choices, generator=1)
    with pytest.raises(TypeError, match="`choices`"):
        gen_thompson_candidates(model, 1, choices=choices.long())
    with pytest.raises(TypeError, match="`options`"):
        gen_thompson_candidates(model, 1, bounds=BOUNDS, options="fast")
    far = choices.clone()
    far[3] = 1e300
    with pytest.raises(ValueError, match="`choices`"):
        gen_thompson_candidates(model, 1, choices=far)
    with pytest.raises(ValueError, match="`bounds`"):
        gen_thompson_candidates(model, 1, bounds=BOUNDS * 1e300)
    with pytest.raises(TypeError, match="`bounds`"):
        gen_thompson_candidates(model, 1, bounds=BOUNDS.half())
    with pytest.raises(ValueError, match="`raw_samples`"):  # 8 TiB of Sobol points
        gen_thompson_candidates(model, 1, bounds=BOUNDS, raw_samples=2**39)
    with pytest.raises(TypeError, match="`options`"):
        gen_thompson_candidates(
            model, 1, bounds=BOUNDS, raw_samples=16, options={"maxiter": "3"}
        )


def test_after_a_t_batched_posterior_call(tkwargs):
    # Issue 14 item 6, through the generator: same candidates as before the call.
    model, choices = _svgp(**tkwargs), _choices(50, **tkwargs)
    expected = gen_thompson_candidates(model, 3, choices=choices, generator=seeded(2))
    with torch.no_grad():
        model.posterior(choices[:12].reshape(4, 3, 2))
    result = gen_thompson_candidates(model, 3, choices=choices, generator=seeded(2))
    assert torch.equal(result.indices, expected.indices)
