"""The §3 metrics against values worked out by hand (the arithmetic is in each comment)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hybridsched.results import metrics as m
from hybridsched.records import WORKER_DTYPE


def test_speedup_and_efficiency():
    # Eq. 4: 10 s serial / 2.5 s = 4; Eq. 5: 4 / 8 = 0.5
    assert m.speedup(10.0, 2.5) == 4.0
    assert m.efficiency(4.0, 8) == 0.5


def test_performance_efficiency_over_repetitions():
    # P = 1/T = (0.5, 0.25, 0.4); P_max = 0.5 -> E_p = (1, 0.5, 0.8), mean 0.7667
    e = m.performance_efficiency([2.0, 4.0, 2.5])
    assert np.allclose(e, [1.0, 0.5, 0.8])
    assert m.mean_performance_efficiency([2.0, 4.0, 2.5]) == pytest.approx(2.3 / 3)
    assert math.isnan(m.mean_performance_efficiency([]))


def test_karp_flatt_regular_case():
    # Eq. 8 at sigma = 3, k = 4: (1/3 - 1/4) / (3/4) = (1/12) / (3/4) = 1/9
    a = m.serial_fraction(3.0, 4)
    assert a.value == pytest.approx(1 / 9)
    assert not a.diagnostic
    # the sigma_E form of Eq. 8: (1 - 0.75) / (0.75 * 3) = 1/9
    assert (1 - 0.75) / (0.75 * 3) == pytest.approx(a.value)
    # and Eq. 6 gives back sigma = 3 (sigma_E = 0.75)
    assert m.amdahl_speedup(a.value, 4) == pytest.approx(3.0)


def test_karp_flatt_flagged_superlinear():
    # sigma = 4.1 > k = 4: (1/4.1 - 1/4) / (3/4) = (-0.0060976) / 0.75 = -0.0081301
    a = m.serial_fraction(4.1, 4)
    assert a.value == pytest.approx((1 / 4.1 - 0.25) / 0.75)
    assert a.value < 0 and a.diagnostic


def test_karp_flatt_flagged_slowdown():
    # sigma = 0.5 < 1 at k = 2: (2 - 0.5) / 0.5 = 3 (> 1, not a fraction)
    a = m.serial_fraction(0.5, 2)
    assert a.value == pytest.approx(3.0)
    assert a.diagnostic


def test_karp_flatt_undefined_below_two_workers():
    a = m.serial_fraction(0.9, 1)
    assert math.isnan(a.value) and not a.diagnostic
    assert math.isnan(m.karp_flatt(float("nan"), 4))


def test_karp_flatt_eff_uses_min_k_n():
    # Eq. 10 at k = 8 on N = 2 with sigma = 1.8: k_eff = 2 -> (1/1.8 - 1/2) / (1/2) = 1/9
    e = m.karp_flatt_eff(1.8, 8, 2)
    assert e.value == pytest.approx(1 / 9)
    assert not e.diagnostic
    # the nominal-k alpha of the same run: (1/1.8 - 1/8) / (7/8) = 0.49206
    assert m.karp_flatt(1.8, 8) == pytest.approx((1 / 1.8 - 0.125) / 0.875)
    # sigma = 2.2 above k_eff = 2 is flagged (though below the nominal 8)
    assert m.karp_flatt_eff(2.2, 8, 2).diagnostic


def test_amdahl_and_gustafson():
    # Eq. 6: alpha = 0.05, N = 24: 1 / (0.05 + 0.95/24) = 1 / 0.0895833 = 11.1628
    assert m.amdahl_speedup(0.05, 24) == pytest.approx(1 / (0.05 + 0.95 / 24))
    assert m.amdahl_speedup(0.05, 24) == pytest.approx(11.16279, rel=1e-5)
    # Eq. 9: 24 - 0.05 * 23 = 22.85; solved back: (24 - 22.85) / 23 = 0.05
    assert m.gustafson_speedup(0.05, 24) == pytest.approx(22.85)
    assert m.gustafson_alpha(22.85, 24) == pytest.approx(0.05)
    assert math.isnan(m.gustafson_alpha(1.0, 1))


def test_overhead_equations_agree():
    # T1 = 12 s, k = 4, T4 = 4 s, alpha = 0.1:
    # Eq. 16: 4 - (1.2 + 10.8/4) = 4 - 3.9 = 0.1 s
    assert m.overhead_time(12.0, 4.0, 4, alpha=0.1) == pytest.approx(0.1)
    # Eq. 17: sigma = 3: 1/3 - 0.1 - 0.9/4 = 0.0083333 = 0.1 / 12
    assert m.overhead_fraction(3.0, 4, alpha=0.1) == pytest.approx(0.1 / 12)
    # alpha = 0 (independent frames): T_ov = T_k - T_1/k = 4 - 3 = 1 s
    assert m.overhead_time(12.0, 4.0, 4) == pytest.approx(1.0)


def _workers(rows):
    w = np.zeros(len(rows), WORKER_DTYPE)
    for i, (start, end, user, system, iowait) in enumerate(rows):
        w[i]["worker"] = i
        w[i]["start"], w[i]["end"] = start, end
        w[i]["user"], w[i]["system"], w[i]["iowait"] = user, system, iowait
    return w


def test_thread_utilisation():
    # Eq. 11: (0.6 + 0.2 + 0.1) / (0.9 + 0.1) = 0.9
    assert m.thread_utilisation(0.6, 0.2, 0.1, 0.1) == pytest.approx(0.9)
    assert math.isnan(m.thread_utilisation(0, 0, 0, 0))
    # per worker: lifetime 1 s with 0.5 s active -> 0.5; lifetime 2 s, 2.0 s active -> 1.0;
    # CPU time above the lifetime (clock granularity) clamps idle at 0 -> 1.0
    w = _workers([(0.0, 1.0, 0.4, 0.1, 0.0), (0.0, 2.0, 1.5, 0.3, 0.2), (0.0, 1.0, 1.02, 0.0, 0.0)])
    assert np.allclose(m.worker_utilisations(w), [0.5, 1.0, 1.0])


def test_many_core_utilisation():
    # Eq. 14: workers active 0.5 + 2.0 = 2.5 s over N = 2 cores and a span of
    # max end 2.5 - min start 0.5 = 2 s -> 2.5 / (2 * 2) = 0.625
    w = _workers([(0.5, 1.5, 0.4, 0.1, 0.0), (1.0, 2.5, 1.5, 0.3, 0.2)])
    assert m.many_core_utilisation(w, 2) == pytest.approx(0.625)
    # Eq. 12 with the same numbers
    assert m.system_utilisation([0.5, 2.0], 2, 2.0) == pytest.approx(0.625)
    assert math.isnan(m.many_core_utilisation(_workers([]), 2))


def test_distributed_amdahl():
    # P = 2 nodes x k = 4 -> P_k = 8. Eq. 19 at alpha = 0.1: 1 / (0.1 + 0.9/8) = 4.70588
    assert m.amdahl_speedup(0.1, 2 * 4) == pytest.approx(1 / 0.2125)
    # Eq. 20 at sigma = 6: (8/6 - 1) / 7 = 0.047619
    a = m.distributed_alpha(6.0, 2, 4)
    assert a.value == pytest.approx((8 / 6 - 1) / 7) and not a.diagnostic
    # equal to the Karp-Flatt alpha at k = P_k
    assert a.value == pytest.approx(m.karp_flatt(6.0, 8))
    # sigma 9 > P_k = 8: flagged; P_k = 1: undefined
    assert m.distributed_alpha(9.0, 2, 4).diagnostic
    assert math.isnan(m.distributed_alpha(1.0, 1, 1).value)


def test_practical_equivalence_threshold():
    # §5: under 1 % apart is practically equivalent; 23.649 vs 23.421 is 0.97 % -> equivalent
    assert m.practically_equivalent(23.649, 23.421)
    # 23.608 vs 23.358 is 1.07 % -> not equivalent
    assert not m.practically_equivalent(23.608, 23.358)
    assert m.relative_difference(23.608, 23.358) == pytest.approx(0.0107, abs=1e-4)
