"""Synthetic genotypes: people of several populations, 0/1/2 allele counts per SNP, stored as int8.

Balding-Nichols model: each SNP has an ancestral allele frequency ``f ~ U(0.05, 0.95)``; population ``k`` draws
its own frequency ``p_k ~ Beta(f (1 - F) / F, (1 - f)(1 - F) / F)`` (``F``: the fixation index); a person of
population ``k`` carries ``Binomial(2, p_k)`` copies at each SNP, independently. Sites hold different mixtures
of the populations (site ``i`` weights population ``k`` by ``Dirichlet`` draws), which is what makes the
federated data non-iid. The population structure puts ``populations - 1`` large eigenvalues above the bulk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file

__all__ = ["genotype_sites", "write_genotype_sites"]


def genotype_sites(sizes, dimension: int, *, populations: int = 3, fst: float = 0.1, seed: int = 0,
                   block_rows: int = 64):
    """Genotype matrices of the sites, one int8 array (s_i, d) each.

    Parameters
    ----------
    sizes : sequence of int
        People per site.
    dimension : int
        ``d``, SNPs.
    populations : int
        Number of populations.
    fst : float
        ``F`` of the Balding-Nichols model (``0 < F < 1``).
    seed : int
        Every draw derives from it.
    block_rows : int
        People drawn at a time (bounds the int64 temporaries to ``block_rows x d``).

    Yields
    ------
    ndarray of shape (s_i, d), int8
        Entries 0, 1 or 2.
    """
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.05, 0.95, dimension)
    a = f * (1 - fst) / fst
    b = (1 - f) * (1 - fst) / fst
    freqs = rng.beta(a, b, size=(populations, dimension))
    for size in sizes:
        mixture = rng.dirichlet(np.ones(populations))
        members = np.sort(rng.choice(populations, size=int(size), p=mixture))
        G = np.empty((int(size), dimension), dtype=np.int8)
        for start in range(0, int(size), block_rows):
            who = members[start:start + block_rows]
            G[start:start + len(who)] = rng.binomial(2, freqs[who]).astype(np.int8)
        yield G


def write_genotype_sites(folder, sizes, dimension: int, **kw) -> list[Path]:
    """Write :func:`genotype_sites` as ``folder/partition_<i>.npy`` (int8) and return the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, G in enumerate(genotype_sites(sizes, dimension, **kw)):
        paths.append(folder / f"partition_{i}.npy")
        write_file(paths[-1], lambda handle: np.save(handle, G, allow_pickle=False))
    return paths
