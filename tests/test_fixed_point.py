"""Exact sums of float64 values through SecAgg+'s integer channel (fl_strategies.privacy.fixed_point).

The sum is checked against the exactly rounded float sum (``math.fsum``), and the limbs go through Flower's own
quantiser, masks that cancel modulo ``M``, and the server's dequantisation as ``SecAggPlusWorkflow.unmask_stage``
computes it, then ``secure_sum``'s ``* m``: an identity that Flower's arithmetic breaks would show.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_strategies.privacy.fixed_point import MODULUS, LimbCode, limb_code


def through_secagg(code: LimbCode, uploads: list[np.ndarray], seed: int = 0) -> np.ndarray:
    """What the server gets for ``uploads`` (each (L, N) limbs): Flower's client quantiser with weight 1, masks
    summing to 0 mod M, and the unmask stage's dequantisation times ``m``."""
    Q, C, M = code.quantization_range, code.clipping_range, code.modulus
    rng = np.random.default_rng(seed)
    masks = [rng.integers(0, M, uploads[0].shape) for _ in uploads[1:]]
    masks.insert(0, (-np.sum(masks, axis=0)) % M if masks else np.zeros(uploads[0].shape, dtype=np.int64))
    total = np.zeros(uploads[0].shape, dtype=np.int64)
    factors = 0
    for y, mask in zip(uploads, masks):
        q_ratio = round(1.0 * Q)
        (q,) = quantize([y * (q_ratio / Q)], C, Q)
        assert np.array_equal(q, y + C)  # the quantiser is the identity shifted by C: no stochastic rounding
        total = (total + q.astype(np.int64) + mask) % M
        factors += q_ratio
    (avg,) = dequantize([total], C, Q)
    avg += -(len(uploads) - 1) * C
    avg *= Q / factors
    return avg * len(uploads)


values = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(m=st.integers(1, 1000), scale_exp=st.integers(-300, 300), data=st.data())
def test_sum_over_m_clients_is_the_exact_sum_within_the_stated_tolerance(m, scale_exp, data):
    bound = math.ldexp(1.0, scale_exp) * data.draw(st.floats(0.5, 1.0))
    code = limb_code(bound, m)
    n_clients = data.draw(st.integers(1, min(m, 6)))
    xs = [np.array(data.draw(st.lists(values, min_size=3, max_size=3))) * bound for _ in range(n_clients)]
    extremes = data.draw(st.sampled_from([0.0, 1.0, -1.0]))
    xs[0][0] = extremes * bound  # the bound itself, and its negative, are representable
    code = LimbCode(m, code.exponent)
    got = code.decode(through_secagg(code, [code.encode(x) for x in xs]))
    exact = np.array([math.fsum(col) for col in zip(*xs)])  # the exact sum, rounded once: half an ulp more
    assert np.all(np.abs(got - exact) <= code.tolerance(exact) + np.spacing(np.abs(exact)) / 2)
    assert code.max_value >= bound and code.resolution <= 4 * bound * 2.0 ** (-3 * code.limb_bits)


def test_the_precision_is_finer_than_float64_for_up_to_1000_clients():
    for m in (2, 4, 100, 1000):
        code = limb_code(1.0, m)
        assert m * code.quantization_range <= MODULUS // 2
        assert code.limb_bits * code.limbs >= 63
        assert code.resolution <= 2.0 ** -61


def test_a_sum_of_opposite_values_and_tiny_ones_is_exact():
    code = limb_code(1e6, 4)
    xs = [np.array([1e6, -3.5, 1e-9, 0.1]), np.array([-1e6, 3.5, -1e-9, 0.2]), np.array([0.0, 0.0, 1e-12, 0.3])]
    got = code.decode(through_secagg(code, [code.encode(x) for x in xs]))
    exact = np.array([math.fsum(c) for c in zip(*xs)])
    np.testing.assert_array_equal(got[:2], [0.0, 0.0])
    assert np.all(np.abs(got - exact) <= code.tolerance(exact) + np.spacing(np.abs(exact)) / 2)
    assert abs(got[2] - 1e-12) <= 4 * code.resolution  # 2^-f ~ 1e-13 of a bound of 1e6


def test_values_beyond_the_range_are_refused_not_clipped():
    code = limb_code(10.0, 4)
    assert code.max_value == 16.0
    code.encode(np.array([16.0, -16.0]))
    for bad in (16.000001, -17.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="exceeds the fixed-point range|not finite"):
            code.encode(np.array([0.0, bad]))


def test_decode_refuses_what_is_not_a_sum_of_limbs():
    code = limb_code(1.0, 4)
    with pytest.raises(ValueError, match="not an integer"):
        code.decode(np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="exceeds m C"):
        code.decode(np.full((3, 2), 4 * code.clipping_range + 1))
    with pytest.raises(ValueError, match="shape"):
        code.decode(np.zeros((2, 2)))


def test_the_limb_sums_never_wrap_the_modulus():
    """Every client at the top of every limb: the modular sum is still the integer sum."""
    for m in (2, 3, 4, 7, 1000):
        code = limb_code(1.0, m)
        top = np.full((code.limbs, 2), code.clipping_range)
        sums = through_secagg(code, [top, -top] * (m // 2) + [top] * (m % 2))
        assert np.array_equal(np.rint(sums), top.sum() / top.size * (m % 2) * np.ones_like(top))
        sums = through_secagg(code, [top] * min(m, 50))
        np.testing.assert_array_equal(np.rint(sums), min(m, 50) * top)
