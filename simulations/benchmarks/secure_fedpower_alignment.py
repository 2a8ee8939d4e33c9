"""Rounds to convergence of ``fedpower`` / ``localpower`` with the server's alignment against each client aligning
its own reply to the broadcast basis (what a SecAgg+ sum allows), in numpy (no Flower; rounds are not timings).

Per round ``t`` every client ``i`` runs ``p_t`` local power iterations from the broadcast ``Z``
(:func:`fl_strategies.kernels.power.local_power_iterations`) and has ``(Y_i, Z_prev_i)``. The server then forms
``Z_new = orth(sum_i s_i Y_i D_i / n)`` with

* ``server``: ``D_i = procrustes(Z_prev_i, Z_prev_0)``, the plain strategy's alignment against the reference
  client 0 (it needs every site's own ``Z_prev_i``);
* ``client``: ``D_i = procrustes(Z_prev_i, Z)``, each client against the broadcast ``Z`` before its reply is summed:
  the server needs only ``sum_i s_i Y_i D_i`` (one SecAgg+ sum);
* ``none``: ``D_i = I`` (no alignment; a sum as well).

It prints, per data set and schedule, the rounds each form needs until ``sin theta(Z, U_k) <= tol`` against
``eigh`` of the pooled matrix (``-`` when not within ``--rounds``), and the sin theta after the last round. Data:
``fedpower-model1`` (the run config's defaults: 10 iid clients) and genotypes (:func:`simulations.data.genotypes
.genotype_sites`: sites of different population mixtures, centred and hwe-scaled with the pooled frequencies).
Usage::

    python -m simulations.benchmarks.secure_fedpower_alignment [--rounds 200] [--tol 1e-6] [--out FOLDER]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from fl_strategies.kernels.linalg import orth, procrustes, subspace_distance, top_eigenvectors
from fl_strategies.kernels.power import local_power_iterations
from fl_strategies.settings.schedule import round_lengths

from . import out_folder

__all__ = ["ALIGNMENTS", "iterate", "rounds_to_tolerance", "main"]

ALIGNMENTS = ("server", "client", "none")
"""The three forms compared (module docstring)."""


def iterate(local: list[np.ndarray], sizes: list[int], Z: np.ndarray, lengths: list[int], alignment: str):
    """The server's estimates of one form, round by round (noise-free).

    Parameters
    ----------
    local : list of ndarray of shape (d, d)
        The clients' ``A_i``.
    sizes : list of int
        Their row counts ``s_i``.
    Z : ndarray of shape (d, r)
        ``Z_0``, orthonormal.
    lengths : list of int
        ``p_t``, local iterations of each round (:func:`~fl_strategies.settings.schedule.round_lengths`).
    alignment : {"server", "client", "none"}
        The form (module docstring).

    Yields
    ------
    ndarray of shape (d, r)
        ``Z_t`` after round ``t = 1, 2, ...``.
    """
    n = float(sum(sizes))
    for steps in lengths:
        replies = [local_power_iterations(A, Z, steps, 0.0, None) for A in local]
        total = np.zeros_like(Z)
        for s, (Y, Z_prev) in zip(sizes, replies):
            target = {"server": replies[0][1], "client": Z}.get(alignment)
            D = procrustes(Z_prev, target) if target is not None and steps > 1 else np.eye(Z.shape[1])
            total += s * (Y @ D)
        Z = orth(total / n)
        yield Z


def rounds_to_tolerance(local: list[np.ndarray], sizes: list[int], k: int, r: int, lengths: list[int],
                        alignment: str, tol: float, seed: int = 0) -> tuple[int | None, float]:
    """Run one form (:func:`iterate`) from a seeded ``Z_0`` and count its rounds to ``tol``.

    Parameters
    ----------
    local, sizes, lengths, alignment : as :func:`iterate`.
    k, r : int
        ``rank`` and ``iteration-rank`` (``k <= r``).
    tol : float
        The sin theta to reach against ``eigh`` of the pooled ``sum_i s_i A_i / n``.
    seed : int
        Of ``Z_0``.

    Returns
    -------
    tuple of (int or None, float)
        The first round with ``sin theta <= tol`` (``None`` if none), and the sin theta after the last round.
    """
    pooled = sum(s * A for s, A in zip(sizes, local)) / float(sum(sizes))
    U = top_eigenvectors(pooled, k)[1]
    Z = orth(np.random.default_rng(seed).standard_normal((pooled.shape[0], r)))
    reached, dist = None, subspace_distance(Z, U)
    for t, Z in enumerate(iterate(local, sizes, Z, lengths, alignment), start=1):
        dist = subspace_distance(Z, U)
        if reached is None and dist <= tol:
            reached = t
    return reached, dist


def _model1() -> tuple[list[np.ndarray], list[int], int, int]:
    from simulations.data.federated_data import local_covariance
    from simulations.engines import fused_run_config

    cfg = fused_run_config({"dataset": "fedpower-model1"})
    pairs = [local_covariance(cfg, i) for i in range(cfg["num-clients"])]
    return [A for A, _ in pairs], [s for _, s in pairs], cfg["rank"], cfg["iteration-rank"]


def _genotypes(sizes=(300, 250, 350, 300, 400, 200), d: int = 400) -> tuple[list[np.ndarray], list[int], int, int]:
    from fl_strategies.kernels.standardize import hwe_scale
    from simulations.data.genotypes import genotype_sites

    sites = [G.astype(np.float64) for G in genotype_sites(sizes, d, populations=4, seed=3)]
    mean = np.vstack(sites).mean(axis=0)
    scale = hwe_scale(mean)
    X = [(G - mean) / scale for G in sites]
    return [x.T @ x / x.shape[0] for x in X], [x.shape[0] for x in X], 3, 5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--out", default=None, help="folder of the table (default: a new one, bench-runs/...)")
    args = parser.parse_args(argv)
    lines = [f"| data | schedule | p | " + " | ".join(f"{a}: rounds (sin theta at {args.rounds})" for a in ALIGNMENTS)
             + " |", "|---|---|---|" + "---|" * len(ALIGNMENTS)]
    print("\n".join(lines), flush=True)
    for name, load in (("fedpower-model1", _model1), ("genotypes", _genotypes)):
        local, sizes, k, r = load()
        for schedule, p in (("fixed", 2), ("fixed", 4), ("decayed", 4), ("halving", 8)):
            lengths = round_lengths(p, schedule, num_rounds=args.rounds)
            cells = []
            for alignment in ALIGNMENTS:
                reached, dist = rounds_to_tolerance(local, sizes, k, r if schedule != "halving" else k, lengths,
                                                    alignment, args.tol)
                cells.append(f"{reached if reached is not None else '-'} ({dist:.1e})")
            lines.append(f"| {name} | {schedule} | {p} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    folder = out_folder("secure_fedpower_alignment", args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "secure_fedpower_alignment.md").write_text(
        "python -m simulations.benchmarks.secure_fedpower_alignment "
        + " ".join(argv if argv is not None else sys.argv[1:]) + "\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
