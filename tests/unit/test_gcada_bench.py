"""mxhet-bench gcada: the paper's order statistics and the loads up to a threshold."""
import numpy as np
import pytest
from scipy import integrate

from bench.gcada import expected_iteration_time, loads_at


@pytest.mark.parametrize("selected, group_size", [(1, 1), (3, 4), (12, 1), (2, 3)])
def test_expected_iteration_time_is_eq_14(selected, group_size):
    """(η / M_G)·H_s equals eq. (14)'s integral with F^G the CDF of a group's
    minimum, and a Monte Carlo estimate."""
    eta = 1e-4
    f = lambda x: 1 - np.exp(-x / eta)                                        # noqa: E731
    f_group = lambda x: sum(__import__("math").comb(group_size, j) * f(x) ** j * (1 - f(x)) ** (group_size - j)
                            for j in range(1, group_size + 1))                # noqa: E731
    integral, _ = integrate.quad(lambda x: 1 - f_group(x) ** selected, 0, 60 * eta)
    assert expected_iteration_time(selected, group_size, eta) == pytest.approx(integral, rel=1e-6)
    draws = np.random.RandomState(0).exponential(eta, size=(100000, selected, group_size))
    assert expected_iteration_time(selected, group_size, eta) == pytest.approx(
        draws.min(axis=2).max(axis=1).mean(), rel=0.02)


def test_loads_up_to_a_time():
    log = [{"t": 0.1, "downloads": 12, "uploads": 3}, {"t": 0.2, "downloads": 0, "uploads": 0},
           {"t": 0.3, "downloads": 4, "uploads": 1}]
    assert loads_at(log, 0.25, 32) == {"iterations": 2, "communication": 15, "computation": 12 * 32,
                                       "downloads": 12}
