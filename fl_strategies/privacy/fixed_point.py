"""Exact sums through SecAgg+: float64 values as fixed-point integers split into limbs that Flower's quantiser
passes unchanged.

Flower's SecAgg+ client quantises each uploaded entry ``y`` as ``q = stochastic_round((clip(y, -C, C) + C) Q /
(2 C))`` (``flwr/common/secure_aggregation/quantization.py``), masks ``q`` modulo ``M`` and the server recovers
``sum_i q_i mod M`` and dequantises it. With ``Q = 2^b`` and ``C = 2^(b-1)`` the factor ``Q / (2 C)`` is exactly 1:
an integer ``y`` in ``[-C, C]`` becomes the integer ``q = y + C`` in ``[0, Q]`` with no rounding at all
(``ceil`` of an integer is itself, and a uniform draw in ``[0, 1)`` is never below 0), the per-client weight
factor is ``Q`` and its ``dq_ratio`` exactly 1. The server's sum of the ``m`` clients' ``q`` is at most ``m Q``;
with ``m Q <= M / 2`` it never wraps, so SecAgg+'s dequantised average times ``m`` is the exact integer sum of
the ``y`` up to the round-off of one division and one multiplication by ``m`` (far below 1/2: it is rounded away).

:class:`LimbCode` uses that channel for float64 values. A value ``x`` with ``|x| <= bound`` becomes the integer
``v = rint(x 2^f)``, ``|v| <= 2^(bL - 1)``, with a public exponent ``f`` (:func:`limb_code`); ``v`` is written in
balanced base ``2^b`` with ``L`` limbs, ``v = sum_j d_j 2^(b j)``, ``d_j`` in ``[-2^(b-1), 2^(b-1)]``. SecAgg+ sums
each limb over the clients exactly (``D_j = sum_i d_ij``, no carries are lost: the limbs are summed apart), and
the server recombines ``V = sum_j D_j 2^(b j) = sum_i v_i`` in exact integer arithmetic, then rounds ``V 2^-f``
once to float64. The result is the exact sum of the clients' fixed-point values; each differs from its float64
value by at most ``2^-(f+1)``, so

    ``|decode(sum) - sum_i x_i| <= m 2^-(f+1) + ulp(sum) / 2``, with ``2^-f <= 2 bound 2^(1 - bL)``.

With ``M = 2^32``, ``b = min(30, 31 - ceil(log2 m))`` (29 for 4 clients, 21 for 1000; Flower's quantiser
casts ``q`` to int32, so ``2^b < 2^31``) and ``L = 3`` limbs a value carries
``bL >= 63`` bits: below float64's own 53-bit resolution of ``bound`` by a factor of at least ``2^9``. The scale
depends only on ``bound``, ``m`` and ``L``, which the server makes public (it never depends on what a site's
upload holds); a value beyond ``bound`` is refused, never clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["LIMBS", "MODULUS", "LimbCode", "limb_code"]

MODULUS = 2 ** 32
"""SecAgg+'s modulus (Flower's default and upper limit)."""

LIMBS = 3
"""Limbs per value: ``3 b`` bits, at least 63 for up to 1000 clients."""


@dataclass(frozen=True)
class LimbCode:
    """How ``m`` clients' float64 values travel through SecAgg+ as limbs summed exactly.

    Parameters
    ----------
    num_clients : int
        ``m``, the clients whose uploads are summed (``m Q <= M / 2``).
    exponent : int
        ``f``: a value ``x`` is the integer ``rint(x 2^f)``.
    limbs : int
        ``L``.
    modulus : int
        ``M``, SecAgg+'s modulus, a power of two.
    """

    num_clients: int
    exponent: int
    limbs: int = LIMBS
    modulus: int = MODULUS

    def __post_init__(self) -> None:
        if self.num_clients < 1 or self.limbs < 1 or self.limb_bits < 2:
            raise ValueError(f"no limb code for {self.num_clients} clients, {self.limbs} limbs and modulus "
                             f"{self.modulus}: each limb would carry {self.limb_bits} bits")

    @property
    def limb_bits(self) -> int:
        """``b``, the largest with ``m 2^b <= M / 2`` and ``2^b < 2^31`` (Flower's quantiser casts to int32)."""
        return min(30, self.modulus.bit_length() - 2 - (self.num_clients - 1).bit_length())

    @property
    def quantization_range(self) -> int:
        """SecAgg+'s ``quantization_range`` ``Q = 2^b``."""
        return 2 ** self.limb_bits

    @property
    def clipping_range(self) -> float:
        """SecAgg+'s ``clipping_range`` ``C = 2^(b-1)``: Flower's quantiser is then ``q = y + C`` on integers."""
        return float(2 ** (self.limb_bits - 1))

    @property
    def max_value(self) -> float:
        """The largest ``|x|`` one client may upload: ``2^(bL - 1 - f)``."""
        return math.ldexp(1.0, self.limb_bits * self.limbs - 1 - self.exponent)

    @property
    def resolution(self) -> float:
        """``2^-f``: the spacing of the fixed-point values (each client's rounding is at most half of it)."""
        return math.ldexp(1.0, -self.exponent)

    def tolerance(self, total: np.ndarray | float = 0.0) -> np.ndarray | float:
        """The bound ``m 2^-(f+1) + ulp(total) / 2`` on ``|decode - sum_i x_i|`` (module docstring)."""
        return self.num_clients * self.resolution / 2 + np.spacing(np.abs(total)) / 2

    def encode(self, x: np.ndarray) -> np.ndarray:
        """One client's values as limbs, each an integer in ``[-C, C]`` held in float64.

        Parameters
        ----------
        x : ndarray, shape (N,)
            Finite float64 values with ``|x| <= max_value``.

        Returns
        -------
        ndarray, shape (L, N)
            ``d_j`` with ``rint(x 2^f) = sum_j d_j 2^(b j)``.

        Raises
        ------
        ValueError
            If a value is not finite or beyond :attr:`max_value` (it would overflow the top limb).
        """
        x = np.asarray(x, dtype=np.float64).ravel()
        if not np.all(np.isfinite(x)):
            raise ValueError("a value to encode is not finite")
        if x.size and np.max(np.abs(x)) > self.max_value:
            raise ValueError(f"a value ({np.max(np.abs(x)):.6g}) exceeds the fixed-point range {self.max_value:.6g}: "
                             "it would overflow the top limb, so nothing is encoded")
        v = np.rint(np.ldexp(x, self.exponent))  # exact: a power-of-two scale, then an integer (53 bits at most)
        base = float(self.quantization_range)
        out = np.empty((self.limbs, x.size))
        for j in range(self.limbs - 1):
            q = np.rint(v / base)  # v / 2^b is exact, and so is v - 2^b q: an integer of at most b - 1 bits
            out[j] = v - q * base
            v = q
        out[-1] = v
        if np.any(np.abs(out[-1]) > self.clipping_range):  # only by a bug: max_value bounds the top limb
            raise ValueError("a value overflows the top limb")
        return out

    def decode(self, sums: np.ndarray) -> np.ndarray:
        """The float64 sum of the clients' values from the sums of their limbs.

        Parameters
        ----------
        sums : ndarray, shape (L, N)
            ``D_j = sum_i d_ij`` as SecAgg+ returns them (integers up to the round-off of its dequantisation).

        Returns
        -------
        ndarray, shape (N,)
            ``sum_i rint(x_i 2^f) 2^-f``, rounded once to float64.

        Raises
        ------
        ValueError
            If ``sums`` has another number of limbs, an entry that is not within 1/4 of an integer, or one beyond
            ``m C`` (not a sum of ``m`` clients' limbs).
        """
        sums = np.asarray(sums, dtype=np.float64)
        if sums.ndim != 2 or sums.shape[0] != self.limbs:
            raise ValueError(f"limb sums of shape {sums.shape}; expected ({self.limbs}, N)")
        D = np.rint(sums)
        if not np.all(np.abs(sums - D) <= 0.25):
            raise ValueError("a limb sum is not an integer: it is not an exact SecAgg+ sum of limbs")
        if np.any(np.abs(D) > self.num_clients * self.clipping_range):
            raise ValueError(f"a limb sum exceeds m C = {self.num_clients * self.clipping_range:.6g}: it is not a "
                             f"sum of {self.num_clients} clients' limbs")
        total = np.zeros(sums.shape[1], dtype=object)
        for j in range(self.limbs - 1, -1, -1):  # exact: Python integers
            total = total * self.quantization_range + D[j].astype(np.int64).astype(object)
        return np.ldexp(total.astype(np.float64), -self.exponent)


def limb_code(bound: float, num_clients: int, limbs: int = LIMBS, modulus: int = MODULUS) -> LimbCode:
    """The limb code whose :attr:`~LimbCode.max_value` is the least power of two ``>= bound``.

    Parameters
    ----------
    bound : float
        A public bound on ``|x|`` of every value a client uploads (> 0, finite).
    num_clients : int
        ``m``.
    limbs, modulus : int
        ``L`` and ``M``.

    Returns
    -------
    LimbCode
        With ``f = bL - 1 - e``, ``2^(e-1) < bound <= 2^e``.
    """
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"the bound of a fixed-point code must be a finite number > 0, got {bound!r}")
    _, e = math.frexp(bound)  # bound = m 2^e, m in [0.5, 1): bound <= 2^e
    if math.ldexp(1.0, e - 1) == bound:
        e -= 1
    code = LimbCode(num_clients, 0, limbs, modulus)
    return LimbCode(num_clients, code.limb_bits * limbs - 1 - e, limbs, modulus)
