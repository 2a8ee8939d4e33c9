"""Sensitivities of the DP power method (spec section 7.2, checks 1 and 2)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_strategies.privacy.dp_sensitivity import delta_a, delta_b, norm_1_2

N, P = 500, 20


def _orthonormal(rng: np.random.Generator, n: int = N, p: int = P) -> np.ndarray:
    Q, _ = np.linalg.qr(rng.standard_normal((n, p)))
    return Q


def _symmetric_perturbation(rng: np.random.Generator, kind: str, n: int = N) -> np.ndarray:
    """A random symmetric C of the given kind, rescaled to ||C||_{1,2} = 1."""
    C = np.zeros((n, n))
    if kind == "dense":
        B = rng.standard_normal((n, n))
        C = B + B.T
    elif kind == "sparse":
        i, j = rng.integers(0, n, size=(2, 12))
        v = rng.standard_normal(12)
        np.add.at(C, (i, j), v)
        np.add.at(C, (j, i), v)
    elif kind == "diagonal":
        idx = rng.choice(n, size=int(rng.integers(1, 20)), replace=False)
        C[idx, idx] = rng.standard_normal(idx.size)
    elif kind == "pair":
        i, j = rng.choice(n, size=2, replace=False)
        C[i, j] = C[j, i] = rng.choice([-1.0, 1.0])
    else:  # pragma: no cover - test bug
        raise ValueError(kind)
    return C / norm_1_2(C)


def test_norm_1_2_on_examples():
    C = np.array([[1.0, -2.0], [0.0, 3.0]])
    assert norm_1_2(C) == pytest.approx(np.sqrt(3.0**2 + 3.0**2))
    # A symmetric off-diagonal pair with |c| = 1/sqrt(2) has ||C||_{1,2} = 1 (spec 1.4).
    pair = np.zeros((4, 4))
    pair[0, 2] = pair[2, 0] = 1 / np.sqrt(2)
    assert norm_1_2(pair) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["dense", "sparse", "diagonal", "pair"])
def test_theorem_3_1_bound_holds_for_random_perturbations(kind):
    """||C X||_F <= Delta^b <= Delta^a for random symmetric C with ||C||_{1,2} = 1: no violations."""
    rng = np.random.default_rng({"dense": 0, "sparse": 1, "diagonal": 2, "pair": 3}[kind])
    count = 150 if kind == "dense" else 600
    worst = 0.0
    for trial in range(count):
        if trial % 50 == 0:
            X = _orthonormal(rng)
        C = _symmetric_perturbation(rng, kind)
        assert np.allclose(C, C.T)
        assert norm_1_2(C) == pytest.approx(1.0, abs=1e-12)
        lhs = np.linalg.norm(C @ X)
        db, da = delta_b(X), delta_a(X)
        assert lhs <= db + 1e-12, (kind, trial, lhs, db)
        assert db <= da + 1e-12
        worst = max(worst, lhs / db)
    if kind in ("diagonal", "pair"):
        # Concentrated perturbations come close to the bound: it is not vacuous.
        assert worst > 0.2, worst


def test_bound_is_attained_by_a_single_entry_on_the_largest_row():
    rng = np.random.default_rng(4)
    X = _orthonormal(rng)
    j = int(np.argmax(np.linalg.norm(X, axis=1)))
    for i in (0, j, N - 1):
        C = np.zeros((N, N))
        C[i, j] = 1.0  # e_i e_j^T, ||C||_{1,2} = 1
        assert norm_1_2(C) == 1.0
        assert np.linalg.norm(C @ X) == pytest.approx(delta_b(X), rel=1e-12)
    # The symmetric diagonal version e_j e_j^T attains it too.
    C = np.zeros((N, N))
    C[j, j] = 1.0
    assert np.linalg.norm(C @ X) == pytest.approx(delta_b(X), rel=1e-12)


def test_delta_b_is_basis_invariant_and_delta_a_is_not():
    rng = np.random.default_rng(5)
    X = _orthonormal(rng)
    changes = []
    for _ in range(10):
        O, _ = np.linalg.qr(rng.standard_normal((P, P)))
        XO = X @ O
        assert delta_b(XO) == pytest.approx(delta_b(X), abs=1e-12)
        changes.append(abs(delta_a(XO) - delta_a(X)))
    assert max(changes) > 1e-3


def test_delta_b_at_most_one_and_equality_cases():
    rng = np.random.default_rng(6)
    X = _orthonormal(rng)
    assert delta_b(X) <= 1.0 + 1e-12
    assert delta_b(X) < delta_a(X)
    # Coordinate basis: a row e_i has norm 1 and max entry 1, so Delta^b = 1 and Delta^a = sqrt(p).
    E = np.eye(N)[:, :P]
    assert delta_b(E) == 1.0
    assert delta_a(E) == pytest.approx(np.sqrt(P))
    # A flat worst row gives equality Delta^a = Delta^b.
    H = np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2)
    assert delta_a(H) == pytest.approx(delta_b(H))


@pytest.mark.parametrize("bad", [np.ones(5), np.ones((0, 3)), np.ones((2, 2, 2))])
def test_bad_shapes_are_refused(bad):
    with pytest.raises(ValueError, match="2-D"):
        delta_b(bad)
    with pytest.raises(ValueError, match="2-D"):
        delta_a(bad)
