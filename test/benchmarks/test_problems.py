import math
from pathlib import Path

import pytest
import torch
from botorch.test_functions.synthetic import Branin, Cosine8, Hartmann, Levy

from benchmarks.problems import (
    load_csv,
    make_dataset_problem,
    make_problem,
    make_sgpts_hartmann6,
    make_synthetic_problem,
    make_threds_problem,
    parse_problem_spec,
    threds_branin,
    threds_rosenbrock,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def test_finite_synthetic_problem_is_negated_rescaled_levy():
    problem = make_synthetic_problem("levy", dim=4, num_arms=500, seed=1)
    assert problem.arms.shape == (500, 4) and problem.is_finite
    assert problem.name == "levy4_500"
    assert (problem.arms >= 0).all() and (problem.arms <= 1).all()
    values = problem.arm_values
    assert values.min() == 0.0 and values.max() == 1.0
    assert problem.optimum == float(values.max())
    # By hand: raw = -Levy(-10 + 20 x), then (raw - lo) / (hi - lo) over the arms.
    raw = -Levy(dim=4).evaluate_true(-10 + 20 * problem.arms)
    expected = (raw - raw.min()) / (raw.max() - raw.min())
    torch.testing.assert_close(values, expected)
    torch.testing.assert_close(problem.objective(problem.arms[:7]), expected[:7])
    assert problem.hyperparameters == {
        "lengthscale": 0.5 * math.sqrt(4),
        "outputscale": 1.0,
    }


def test_arm_sets_are_seeded():
    a = make_synthetic_problem("ackley", dim=3, num_arms=50, seed=4)
    b = make_synthetic_problem("ackley", dim=3, num_arms=50, seed=4)
    c = make_synthetic_problem("ackley", dim=3, num_arms=50, seed=5)
    assert torch.equal(a.arms, b.arms) and not torch.equal(a.arms, c.arms)


def test_box_problems_reach_their_known_optimum():
    branin = make_synthetic_problem("branin")
    assert not branin.is_finite and branin.optimum == pytest.approx(1.0)
    native = torch.tensor(Branin._optimizers, dtype=torch.float64)
    unit = (native - torch.tensor([-5.0, 0.0])) / 15.0
    torch.testing.assert_close(
        branin.objective(unit), torch.ones(3, dtype=torch.float64), atol=1e-5, rtol=0
    )
    raw = make_synthetic_problem("branin", rescale=False)
    assert raw.optimum == pytest.approx(-0.397887)
    assert raw.hyperparameters["outputscale"] > 1.0  # variance of raw values
    # Cosine8 is a maximization problem already: not negated.
    cosine = make_synthetic_problem("cosine8", rescale=False)
    centre = torch.full((1, 8), 0.5, dtype=torch.float64)
    assert cosine.objective(centre).item() == pytest.approx(Cosine8._optimal_value)


def test_synthetic_errors():
    with pytest.raises(ValueError, match="function"):
        make_synthetic_problem("nope")
    with pytest.raises(ValueError, match="2-dimensional"):
        make_synthetic_problem("branin", dim=3)
    with pytest.raises(ValueError, match="num_arms"):
        make_synthetic_problem("levy", num_arms=0)
    with pytest.raises(ValueError, match="noise_std"):
        make_synthetic_problem("levy", noise_std=-1.0)
    with pytest.raises(ValueError, match="optimum"):
        make_synthetic_problem("michalewicz", dim=3)  # no known box optimum


def test_float32_problem():
    problem = make_synthetic_problem("levy", dim=2, num_arms=30, dtype=torch.float32)
    assert problem.arms.dtype == problem.arm_values.dtype == torch.float32


def _write_csv(path, header=True):
    lines = ["a,b,c,y"] if header else []
    lines += ["1,10,5,3", "2,10,7,5", "3,10,9,4", "4,10,11,11"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dataset_problem_standardizes_and_rescales(tmp_path):
    path = _write_csv(tmp_path / "toy.csv")
    problem = make_dataset_problem(path, lengthscale=2.0)
    assert problem.name == "toy" and problem.noise_std == 0.01
    torch.testing.assert_close(
        problem.arm_values, torch.tensor([0.0, 0.25, 0.125, 1.0], dtype=torch.float64)
    )
    arms = problem.arms
    torch.testing.assert_close(arms.mean(0), torch.zeros(3, dtype=torch.float64))
    # Column a = 1..4: mean 2.5, population std sqrt(1.25); column b is constant.
    expected_a = (torch.arange(1.0, 5.0, dtype=torch.float64) - 2.5) / math.sqrt(1.25)
    torch.testing.assert_close(arms[:, 0], expected_a)
    assert (arms[:, 1] == 0).all() and (problem.bounds[0] < problem.bounds[1]).all()
    assert problem.optimum == 1.0
    torch.testing.assert_close(
        problem.objective(arms[[3, 1]] + 0.01), problem.arm_values[[3, 1]]
    )
    by_name = make_dataset_problem(path, target="a")
    by_index = make_dataset_problem(_write_csv(tmp_path / "raw.csv", False), target=0)
    torch.testing.assert_close(by_name.arm_values, by_index.arm_values)
    torch.testing.assert_close(
        by_name.arm_values, torch.tensor([0, 1 / 3, 2 / 3, 1.0], dtype=torch.float64)
    )
    assert make_dataset_problem(path).hyperparameters["lengthscale"] == math.sqrt(3)
    suggested = make_dataset_problem(path, noise=1.0).hyperparameters
    assert suggested["noise"] == 1.0
    subset = make_dataset_problem(path, max_rows=2, seed=3)
    assert subset.arms.shape == (2, 3)


def test_dataset_errors(tmp_path):
    path = _write_csv(tmp_path / "toy.csv")
    with pytest.raises(ValueError, match="target"):
        load_csv(path, target="missing")
    with pytest.raises(ValueError, match="target"):
        load_csv(path, target=9)
    constant = tmp_path / "constant.csv"
    constant.write_text("x,y\n1,2\n3,2\n")
    with pytest.raises(ValueError, match="constant"):
        make_dataset_problem(constant)
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,nan\n")
    with pytest.raises(ValueError, match="NaN"):
        make_dataset_problem(bad)
    with pytest.raises(ValueError, match="path"):
        make_dataset_problem(tmp_path / "absent.csv")


@pytest.mark.parametrize("name, rows", [("abalone", 4177), ("cadata", 20640)])
def test_real_datasets(name, rows):
    if not (DATA / f"{name}.csv").is_file():
        pytest.skip(f"{name}.csv not available")
    problem = make_problem(name, data_dir=DATA)
    assert problem.arms.shape == (rows, 8) and problem.name == name
    assert problem.arm_values.min() == 0 and problem.arm_values.max() == 1
    assert problem.arms.mean(0).abs().max() < 1e-10


def test_threds_problems_match_the_spec():
    maximizers = torch.tensor(
        [[-math.pi, 12.275], [math.pi, 2.275], [9.42478, 2.475]], dtype=torch.float64
    )
    unit = torch.stack([(maximizers[:, 0] + 5) / 15, maximizers[:, 1] / 15], -1)
    torch.testing.assert_close(
        threds_branin(unit),
        torch.full((3,), 1.047394, dtype=torch.float64),
        atol=1e-5,
        rtol=0,
    )
    problem = make_threds_problem("branin")
    assert problem.optimum == pytest.approx(1.047394, abs=1e-6)
    assert problem.noise_std**2 == pytest.approx(0.01)
    grid = torch.stack(
        torch.meshgrid(
            *[torch.linspace(0, 1, 201, dtype=torch.float64)] * 2, indexing="ij"
        ),
        -1,
    ).reshape(-1, 2)
    assert threds_branin(grid).max() <= problem.optimum + 1e-9
    rosenbrock = make_threds_problem("rosenbrock")
    centre = torch.tensor([[2 / 3, 2 / 3]], dtype=torch.float64)
    assert threds_rosenbrock(centre).item() == pytest.approx(10.0)
    assert rosenbrock.optimum == 10.0 and threds_rosenbrock(grid).max() <= 10.0
    finite = make_threds_problem("rosenbrock", num_arms=100, seed=2)
    assert finite.arms.shape == (100, 2) and finite.optimum == float(
        finite.arm_values.max()
    )
    assert finite.hyperparameters == {
        "lengthscale": 0.2,
        "outputscale": 1.0,
        "noise": 0.01,
    }


def test_sgpts_hartmann6_setup():
    problem = make_sgpts_hartmann6()
    assert problem.noise_std**2 == pytest.approx(0.5)
    assert problem.hyperparameters["noise"] == 0.5
    assert problem.optimum == pytest.approx(3.32237)
    optimizer = Hartmann(dim=6).optimizers
    assert problem.objective(optimizer).item() == pytest.approx(3.32237, abs=1e-5)
    # Outputscale = Var(f) over uniform points (about 0.14 for Hartmann-6).
    sample = problem.objective(
        torch.rand(
            20000, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(9)
        )
    )
    assert problem.hyperparameters["outputscale"] == pytest.approx(
        float(sample.var()), rel=0.05
    )


def test_spec_parsing_and_make_problem(tmp_path):
    assert parse_problem_spec("levy:dim=8:arms=20000:rescale=false") == (
        "levy",
        {"dim": 8, "arms": 20000, "rescale": False},
    )
    assert parse_problem_spec("threds_branin:arms=box") == (
        "threds_branin",
        {"arms": None},
    )
    assert parse_problem_spec("x.csv:target=price")[1] == {"target": "price"}
    problem = make_problem("levy:dim=3:arms=40:noise=0.5", arms=30)
    assert problem.arms.shape == (30, 3)  # overrides win
    assert problem.hyperparameters["noise"] == 0.5
    with pytest.raises(ValueError, match="noise"):
        make_problem("levy:dim=3:arms=40:noise=0")
    path = _write_csv(tmp_path / "toy.csv")
    assert make_problem(f"{path}:target=0").arm_values.max() == 1.0
    assert make_problem("sgpts_hartmann6:arms=20").arms.shape == (20, 6)
    hartmann = make_problem("hartmann6:arms=25")
    assert hartmann.arms.shape == (25, 6) and hartmann.name == "hartmann6_25"
    assert make_problem("levy3").dim == 3 and make_problem("cosine8").dim == 8
    with pytest.raises(ValueError, match="key=value"):
        parse_problem_spec("levy:dimension=3")
    with pytest.raises(ValueError, match="bad value"):
        parse_problem_spec("levy:dim=three")
    with pytest.raises(ValueError, match="does not accept"):
        make_problem("threds_branin:dim=3")
    with pytest.raises(ValueError, match="data_dir"):
        make_problem("cadata")
    with pytest.raises(ValueError, match="not found"):
        make_problem("cadata", data_dir=tmp_path)
    with pytest.raises(ValueError, match="Unknown problem"):
        make_problem("what")
