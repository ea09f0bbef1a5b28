r"""The local Ray that the Ray tests share (never a mock)."""


def init_local_ray(tmp_path_factory):
    r"""Start a local Ray with 2 CPUs, no dashboard, one torch thread per worker and
    its session files under pytest's temporary folder; return the ``ray`` module."""
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    return ray
