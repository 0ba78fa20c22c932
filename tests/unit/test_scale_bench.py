"""``mxhet-bench scale`` on a few devices: the real decision code drives the NumPy replicas."""
import numpy as np
import pytest

from bench import scale


@pytest.mark.parametrize("mode", ["esync", "ssp", "adsp", "preduce"])
def test_a_small_scale_run_trains_and_counts_its_decisions(mode):
    r = scale.run_one(mode, 12, seed=1, budget=1.5)
    assert r["devices"] == 12 and r["virtual_s"] >= 1.5
    assert r["decisions"] >= 2 * 12          # at least a registration and a goodbye per device
    assert r["iterations"] >= 12 and r["device_updates"] >= 1 and r["server_updates"] >= 1
    # Learning: speeds are seeded, so the run is deterministic; every mode reaches 0.54-0.65 (chance: 0.1)
    assert r["final_accuracy"] >= 0.45
    assert r["handle_us_per_decision"] > 0 and r["peak_rss_mb"] > 0
    if mode == "esync":
        assert r["rounds"] >= 1 and r["n_i"]["max"] >= r["n_i"]["min"] >= 1
    if mode == "preduce":   # every update went through a group's slot (P = 2: two per group)
        assert r["server_updates"] >= 2 * 2 and r["device_updates"] >= 2


def test_speeds_are_log_normal_and_seeded():
    a, b = scale.speeds(5000, 3), scale.speeds(5000, 3)
    assert np.array_equal(a, b)
    assert abs(np.log(a).std() - scale.SIGMA) < 0.05 and abs(np.median(a) - 1.0) < 0.05


def test_growth_fits_the_exponent():
    rs = [{"devices": n, "x": 2.0 * n ** 1.5} for n in (10, 100, 1000)]
    assert scale.growth(rs, "x") == pytest.approx(1.5)
