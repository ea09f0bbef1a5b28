import numpy as np
import pytest

from benchmarks.tuning.driver import run_trials


class Waiting:
    r"""Counts running trials and asks to wait every third ask."""

    def __init__(self):
        self.running, self.peak, self.asks = set(), 0, 0

    def ask(self):
        self.asks += 1
        if self.asks % 3 == 0 and self.running:
            return None
        key = self.asks
        self.running.add(key)
        self.peak = max(self.peak, len(self.running))
        return key, {"x": float(key)}

    def tell(self, key, loss):
        self.running.remove(key)


@pytest.mark.parametrize("in_flight", [1, 3, 8])
def test_at_most_k_trials_run_and_each_is_told_once(in_flight):
    method = Waiting()
    log = run_trials(lambda: method, lambda c: c["x"], 25, in_flight, seed=0)
    assert len(log.losses) == 25 and not method.running
    assert method.peak == log.max_running <= in_flight
    assert log.max_running == in_flight  # the pool does fill up
    assert len(log.ask_seconds) == len(log.tell_seconds) == 25
    assert len({c["x"] for c in log.configs}) == 25
    if in_flight > 1:  # completion order is shuffled, seeded
        assert log.losses != sorted(log.losses)
        again = run_trials(Waiting, lambda c: c["x"], 25, in_flight, seed=0)
        assert again.losses == log.losses


def test_waiting_with_nothing_running_is_an_error_and_a_time_cap_stops():
    class Stuck:
        def ask(self):
            return None

    with pytest.raises(RuntimeError, match="wait"):
        run_trials(Stuck, lambda c: 0.0, 3, 1, seed=0)
    with pytest.raises(ValueError, match="in_flight"):
        run_trials(Stuck, lambda c: 0.0, 3, 0, seed=0)
    with pytest.raises(TypeError, match="budget"):
        run_trials(Stuck, lambda c: 0.0, 3.0, 1, seed=0)
    log = run_trials(Waiting, lambda c: 0.0, 50, 2, 0, max_optimizer_seconds=0.0)
    assert len(log.losses) == 1 and "stopped after 1 trials" in log.stopped
    assert np.isfinite(log.optimizer_seconds)


def test_repeated_configurations_are_recorded_and_counted_per_100():
    from benchmarks.tuning.driver import TrialLog, to_trace
    from benchmarks.tuning.report import markdown_tables, regret_rows

    # trials 3, 5 and 6 repeat an earlier configuration (the dict order differs)
    configs = [{"x": 0.1, "c": "a"}, {"x": 0.2, "c": "a"}, {"x": 0.3, "c": "b"}]
    configs += [{"c": "a", "x": 0.1}, {"x": 0.4, "c": "a"}]
    configs += [{"x": 0.4, "c": "a"}, {"x": 0.3, "c": "b"}, {"x": 0.5, "c": "b"}]
    log = TrialLog(
        configs=configs,
        losses=[1.0] * 8,
        ask_seconds=[0.0] * 8,
        tell_seconds=[0.0] * 8,
    )
    trace = to_trace(("p", 1, "m", 0), log, 0.0)
    assert trace.metadata["repeats"] == [3, 5, 6]
    rows = regret_rows([trace], [4, 8])
    assert [row["distinct_per_100"] for row in rows] == [75.0, 62.5]
    assert markdown_tables(rows, [4, 8]).endswith("| p, 1 in flight | 62.5 |")
