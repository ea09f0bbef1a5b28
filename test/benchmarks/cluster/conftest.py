import pytest

from benchmarks.problems import make_problem


@pytest.fixture(scope="module")
def problem():
    r"""300 arms of a 3-d Rosenbrock with unit noise."""
    return make_problem("rosenbrock:dim=3:arms=300:noise=1:lengthscale=0.5")
