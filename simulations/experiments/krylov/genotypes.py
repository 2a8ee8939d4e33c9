"""The genotype data of the Krylov comparison: int8 genotypes of four sites with population structure.

Five populations (Balding-Nichols, fixation index 0.005, :mod:`simulations.data.genotypes`), 2000 SNPs, four sites
of 250 people each with their own mixture, stacked site by site into one int8 ``(1000, 2000)`` file, so that
``partitioner = "contiguous"`` over four clients gives each client one site. The structure puts four
eigenvalues above the bulk with small gaps (3.15, 2.99, 2.78, 2.36, then the bulk from 2.18): the ancestry PCs
behind the first where the power method is slow. Usage (from the repository's directory)::

    python -m simulations.experiments.krylov.genotypes   # writes simulations/experiments/krylov/data/genotypes.npy
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulations.data.genotypes import genotype_sites

__all__ = ["PATH", "genotypes", "main"]

PATH = Path(__file__).resolve().parent / "data" / "genotypes.npy"


def genotypes() -> np.ndarray:
    """The pooled genotypes, ``(1000, 2000)`` int8, site after site (250 rows each)."""
    return np.vstack(list(genotype_sites([250] * 4, 2000, populations=5, fst=0.005, seed=0)))


def main() -> None:
    """Write :data:`PATH` (unchanged when it already holds the same data)."""
    G = genotypes()
    if PATH.is_file() and np.array_equal(np.load(PATH), G):
        print(f"{PATH.name} is up to date")
        return
    PATH.parent.mkdir(parents=True, exist_ok=True)
    np.save(PATH, G)
    print(f"wrote {G.shape[0]} x {G.shape[1]} int8 genotypes to {PATH.relative_to(Path.cwd()) if PATH.is_relative_to(Path.cwd()) else PATH.name}")


if __name__ == "__main__":
    main()
