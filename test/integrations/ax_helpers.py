r"""A user's kernel class for the Ax tests, registered with Ax's storage once (import
after ``pytest.importorskip("ax")``)."""

from ax.storage.botorch_modular_registry import register_kernel
from gpytorch.kernels import MaternKernel, ScaleKernel


class UserMatern(ScaleKernel):
    r"""A user's own kernel class, passed through Ax by class and options."""

    def __init__(self, ard_num_dims: int | None = None, nu: float = 2.5) -> None:
        super().__init__(MaternKernel(nu=nu, ard_num_dims=ard_num_dims))


register_kernel(UserMatern)
