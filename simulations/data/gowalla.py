"""The Gowalla check-in data (LightGCN split) for the DP power method: loading, normalising, splitting, Table 1.

The folder holds ``train.txt``, ``valid.txt`` and ``test.txt``; every line is
``user item item ...`` (non-negative integer ids, whitespace separated, a user may
have no items). Together the three files give the paper's Table 1 counts
(29,858 users, 40,981 items, 1,027,370 interactions); ``train.txt`` alone has
719,081 interactions over 40,979 items.

* :func:`load_interactions` -- binary users x items CSR matrix ``R`` (duplicates collapsed);
* :func:`table1_statistics` -- users, items, interactions;
* :func:`normalised_rows` -- ``"user"``: ``r~_u = r_u / sqrt(deg_u)`` (unit rows; the spec's
  recommender default (c), which keeps the user-level sensitivity <= 1), or ``"global"``:
  the paper's ``R~ = D_U^{-1/2} R D_I^{-1/2}`` (Shen et al.'s GF-CF normalisation);
* :func:`split_users` -- a seeded partition of the users over clients (a client holds its users' rows);
* :func:`top_right_singular_vectors`, :func:`coherences`, :func:`hp_coefficient` -- Table 1's
  ``mu_0``, ``mu_1`` and ``Delta^a = c sqrt(p)`` with ``c = mu_0 sqrt(ln n_items)`` (spec 6.2).

What Table 1 can and cannot be reproduced here: ``mu_0 = max_ij |U_ij|`` needs the eigenvectors ``U`` of
``P~ = R~^T R~`` (40,981 x 40,981). A full eigendecomposition is out of reach on 2 cores, so ``mu_0`` and
``mu_1`` are computed over the top-``q`` eigenvectors (right singular vectors of ``R~``, ARPACK). These are
**lower bounds** of the full-``U`` values whatever basis the full ``U`` uses (a max / a row l1 norm over a
subset of the columns). The full-``U`` values are not even well defined: ``P~`` has rank at most 29,858, so
its null space has dimension >= 11,123 and ``max |U_ij|`` (and the row l1 norms) depend on the basis an
eigensolver happens to pick there.

CLI::

    python -m simulations.data.gowalla [--path ../shared/data/gowalla] [--q 128] [--out DIR]

(ARPACK: about 100 s for q = 128, 429 s for q = 256 on the shared 2-core machine) prints the Gowalla row
beside the paper's and writes ``DIR/table1.md``, ``DIR/table1.csv`` and ``DIR/mu0_by_q.csv``
(default ``DIR = simulations/experiments/dp_power/results/dp_table1``).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from fl_strategies.files.plain_files import plain_frame, write_file

__all__ = [
    "DEFAULT_PATH",
    "SPLITS",
    "PAPER_TABLE1",
    "load_interactions",
    "table1_statistics",
    "normalised_rows",
    "split_users",
    "top_right_singular_vectors",
    "coherences",
    "hp_coefficient",
    "table1_row",
    "main",
]

DEFAULT_PATH = Path(__file__).resolve().parents[3] / "shared" / "data" / "gowalla"
"""``../shared/data/gowalla`` next to the repository (the data are not shipped with the package)."""
SPLITS = ("train", "valid", "test")
DEFAULT_OUT = Path("simulations/experiments/dp_power/results/dp_table1")

#: The paper's Table 1, Gowalla row (Delta^a as the coefficient c of sqrt(p); Delta^b = 1).
PAPER_TABLE1 = {
    "users": 29858,
    "items": 40981,
    "interactions": 1027370,
    "mu_0": 0.36,
    "mu_1": 82.48,
    "c": 1.08,
    "delta_b": 1.0,
}


def _parse_file(file: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """(user ids, item ids) of every interaction in one LightGCN-format file, and the largest user id."""
    max_user = -1
    users: list[np.ndarray] = []
    items: list[np.ndarray] = []
    with open(file, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            tokens = line.split()
            if not tokens:
                continue
            try:
                ids = np.array([int(t) for t in tokens], dtype=np.int64)
            except ValueError:
                bad = next(t for t in tokens if not _is_int(t))
                raise ValueError(
                    f"{file}:{lineno}: expected 'user item item ...' with integer ids, found {bad!r}"
                ) from None
            if (ids < 0).any():
                raise ValueError(f"{file}:{lineno}: ids must be non-negative, found {int(ids[ids < 0][0])}")
            max_user = max(max_user, int(ids[0]))
            items.append(ids[1:])
            users.append(np.full(ids.size - 1, ids[0], dtype=np.int64))
    if not users:
        raise ValueError(f"{file}: no user lines (expected 'user item item ...' per line)")
    return np.concatenate(users), np.concatenate(items), max_user


def _is_int(token: str) -> bool:
    try:
        int(token)
    except ValueError:
        return False
    return True


def load_interactions(path: str | Path = DEFAULT_PATH, splits: tuple[str, ...] = SPLITS) -> sp.csr_matrix:
    """Binary user-item matrix of the LightGCN-format files ``<path>/<split>.txt``.

    Parameters
    ----------
    path : str or Path
        Folder holding the split files.
    splits : tuple of str
        Which files to read (``"train"``, ``"valid"``, ``"test"``, or any name with a
        ``.txt`` file in ``path``). The default, all three, gives the paper's Table 1 counts.

    Returns
    -------
    R : scipy.sparse.csr_matrix of shape (max user id + 1, max item id + 1), float64
        ``R[u, i] = 1`` if user ``u`` interacted with item ``i`` in any of the files
        (an interaction listed twice counts once).

    Raises
    ------
    FileNotFoundError
        If the folder or a split file is missing (naming it).
    ValueError
        If a line has a non-integer or negative id (naming the file and line), a file
        has no user line, or ``splits`` is empty.
    """
    path = Path(path)
    if not splits:
        raise ValueError("splits must name at least one file (e.g. ('train', 'valid', 'test'))")
    if not path.is_dir():
        raise FileNotFoundError(f"Gowalla folder not found: {path}")
    users, items, max_user = [], [], -1
    for split in splits:
        file = path / f"{split}.txt"
        if not file.is_file():
            raise FileNotFoundError(f"split file not found: {file}")
        u, i, mu = _parse_file(file)
        max_user = max(max_user, mu)
        users.append(u)
        items.append(i)
    u = np.concatenate(users)
    i = np.concatenate(items)
    n_users = max_user + 1  # users listed with no items are still rows
    n_items = int(i.max()) + 1 if i.size else 0
    R = sp.csr_matrix((np.ones(u.size), (u, i)), shape=(n_users, n_items))
    R.sum_duplicates()
    R.data[:] = 1.0
    return R


def table1_statistics(R: sp.spmatrix) -> dict:
    """Table 1's dataset statistics of a binary interaction matrix.

    Parameters
    ----------
    R : sparse matrix of shape (n_users, n_items)
        Binary interactions (as from :func:`load_interactions`).

    Returns
    -------
    dict
        ``users`` / ``items``: rows / columns with at least one interaction;
        ``interactions``: number of non-zeros.
    """
    R = sp.csr_matrix(R)
    R.eliminate_zeros()
    return {
        "users": int(np.count_nonzero(R.getnnz(axis=1))),
        "items": int(np.count_nonzero(R.getnnz(axis=0))),
        "interactions": int(R.nnz),
    }


def _inv_sqrt(deg: np.ndarray) -> np.ndarray:
    out = np.zeros_like(deg, dtype=np.float64)
    nz = deg > 0
    out[nz] = 1.0 / np.sqrt(deg[nz])
    return out


def normalised_rows(R: sp.spmatrix, mode: str = "user") -> sp.csr_matrix:
    """Degree-normalised interaction matrix.

    Parameters
    ----------
    R : sparse matrix of shape (n_users, n_items)
        Binary interactions.
    mode : {"user", "global"}
        ``"user"``: ``r~_u = r_u / sqrt(deg_u)``, every non-empty row has l2 norm 1 and is
        computed by its user alone (the spec's recommender default (c)).
        ``"global"``: the paper's ``R~ = D_U^{-1/2} R D_I^{-1/2}`` (needs the global item
        degrees ``D_I``); Table 1's ``P~ = R~^T R~``.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_users, n_items), float64
        Empty rows (and, for ``"global"``, empty columns) stay zero.
    """
    R = sp.csr_matrix(R, dtype=np.float64)
    d_u = np.asarray(R.sum(axis=1)).ravel()
    out = sp.diags(_inv_sqrt(d_u)) @ R
    if mode == "global":
        d_i = np.asarray(R.sum(axis=0)).ravel()
        out = out @ sp.diags(_inv_sqrt(d_i))
    elif mode != "user":
        raise ValueError(f"mode must be 'user' or 'global', got {mode!r}")
    return sp.csr_matrix(out)


def split_users(num_users: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """A seeded partition of the users over clients (client ``c`` holds the rows ``R[users[c]]``).

    Parameters
    ----------
    num_users : int
        Number of users (rows of ``R``).
    num_clients : int
        Number of clients, ``1 <= num_clients <= num_users``.
    seed : int
        Seed (>= 0) of the permutation (``numpy.random.default_rng(seed)``).

    Returns
    -------
    list of ndarray of int64
        ``num_clients`` sorted index arrays, sizes differing by at most one, disjoint,
        together ``0 .. num_users - 1``.
    """
    if num_users < 1:
        raise ValueError(f"num_users must be >= 1, got {num_users}")
    if not 1 <= num_clients <= num_users:
        raise ValueError(f"num_clients must be in 1..num_users = {num_users}, got {num_clients}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    perm = np.random.default_rng(seed).permutation(num_users)
    return [np.sort(part) for part in np.array_split(perm, num_clients)]


def top_right_singular_vectors(M: sp.spmatrix, q: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Top-``q`` right singular vectors of ``M`` (= top eigenvectors of ``M^T M``) by ARPACK.

    Parameters
    ----------
    M : sparse matrix of shape (m, n)
        E.g. ``R~`` (users x items).
    q : int
        Number of vectors, ``1 <= q < min(m, n)``.
    seed : int
        Seed of ARPACK's start vector.

    Returns
    -------
    s : ndarray of shape (q,)
        Singular values, descending (eigenvalues of ``M^T M`` are ``s**2``).
    V : ndarray of shape (n, q)
        Matching orthonormal right singular vectors.
    """
    if not 1 <= q < min(M.shape):
        raise ValueError(f"q must be in 1..{min(M.shape) - 1}, got {q}")
    v0 = np.random.default_rng(seed).standard_normal(min(M.shape))
    _, s, Vt = svds(sp.csr_matrix(M), k=q, v0=v0, solver="arpack")
    order = np.argsort(s)[::-1]
    return s[order], Vt[order].T


def coherences(V: np.ndarray) -> dict:
    """Coherences of the eigenvector columns at hand.

    Parameters
    ----------
    V : ndarray of shape (n, q)
        Orthonormal eigenvectors (all ``n`` of them for the paper's definition).

    Returns
    -------
    dict
        ``mu_0 = max_ij |V_ij|`` and ``mu_1 = max_i sum_j |V_ij|``. With ``q < n`` both are
        lower bounds of the full-``U`` values.
    """
    A = np.abs(np.asarray(V))
    return {"mu_0": float(A.max()), "mu_1": float(A.sum(axis=1).max())}


def hp_coefficient(mu_0: float, n_items: int) -> float:
    """Table 1's HP coefficient ``c`` in ``Delta^a = c sqrt(p)``: ``c = mu_0 sqrt(ln n_items)`` (spec 6.2)."""
    return float(mu_0 * math.sqrt(math.log(n_items)))


def table1_row(path: str | Path = DEFAULT_PATH, q: int = 128, seed: int = 0) -> tuple[dict, pd.DataFrame]:
    """Our Gowalla row of Table 1 and ``mu_0`` over growing prefixes of the top-``q`` eigenvectors.

    Parameters
    ----------
    path : str or Path
        Gowalla folder.
    q : int
        Number of top eigenvectors of ``P~`` computed.
    seed : int
        ARPACK start vector seed.

    Returns
    -------
    row : dict
        ``users``, ``items``, ``interactions``, ``mu_0``, ``mu_1`` (over the top ``q``), ``c``,
        ``delta_b`` (= 1, Thm 4.1), ``q``, ``lambda_1``, ``lambda_q``, ``seconds``.
    prefixes : pandas.DataFrame
        ``q``, ``mu_0``, ``c``, ``argmax_item``, ``argmax_vector`` (1-based), ``eigenvalue`` (its
        eigenvalue) and ``rel_gap`` (distance to the neighbouring computed eigenvalues over
        ``lambda``) for ``q`` = 1, 2, 4, ..., q.
    """
    t0 = time.perf_counter()
    R = load_interactions(path)
    stats = table1_statistics(R)
    s, V = top_right_singular_vectors(normalised_rows(R, "global"), q, seed=seed)
    lam = s**2
    rows = []
    qs = sorted({min(2**j, q) for j in range(int(math.log2(q)) + 2)})
    for qq in qs:
        A = np.abs(V[:, :qq])
        i, j = np.unravel_index(int(np.argmax(A)), A.shape)
        rows.append(
            {
                "q": qq,
                "mu_0": float(A[i, j]),
                "c": hp_coefficient(float(A[i, j]), stats["items"]),
                "argmax_item": int(i),
                "argmax_vector": int(j) + 1,
                "eigenvalue": float(lam[j]),
                "rel_gap": _relative_gap(lam, int(j)),
            }
        )
    coh = coherences(V)
    row = {
        **stats,
        **coh,
        "c": hp_coefficient(coh["mu_0"], stats["items"]),
        "delta_b": 1.0,
        "q": q,
        "lambda_1": float(s[0] ** 2),
        "lambda_q": float(s[-1] ** 2),
        "seconds": time.perf_counter() - t0,
    }
    return row, pd.DataFrame(rows)


def _relative_gap(lam: np.ndarray, j: int) -> float:
    """Distance of ``lam[j]`` to its computed neighbours, relative to ``lam[j]`` (nan if none is computed)."""
    others = [abs(lam[j] - lam[i]) for i in (j - 1, j + 1) if 0 <= i < lam.size]
    return float(min(others) / lam[j]) if others else float("nan")


def _markdown(row: dict, prefixes: pd.DataFrame, path: Path) -> str:
    paper = PAPER_TABLE1
    q = row["q"]
    c_from_paper_mu0 = hp_coefficient(paper["mu_0"], paper["items"])
    lines = [
        "# Table 1, Gowalla row (DP power method paper)",
        "",
        f"Data: `{path}` (train + valid + test). `P~ = R~^T R~`, `R~ = D_U^-1/2 R D_I^-1/2`. "
        f"Ours: mu_0, mu_1 over the top q = {q} eigenvectors of P~ (ARPACK), lower bounds of the full-U values.",
        "",
        "| | Users | Items | Interactions | mu_0 | mu_1 | Delta^a (existing) | Delta^b (ours) |",
        "|---|---|---|---|---|---|---|---|",
        f"| paper | {paper['users']:,} | {paper['items']:,} | {paper['interactions']:,} | {paper['mu_0']:.2f} | "
        f"{paper['mu_1']:.2f} | {paper['c']:.2f} x sqrt(p) | 1 |",
        f"| this repo (top {q}) | {row['users']:,} | {row['items']:,} | {row['interactions']:,} | {row['mu_0']:.3f} | "
        f"{row['mu_1']:.2f} | {row['c']:.3f} x sqrt(p) | 1 |",
        "",
        f"c = mu_0 sqrt(ln n_items), sqrt(ln {row['items']}) = {math.sqrt(math.log(row['items'])):.4f}: "
        f"the paper's mu_0 = 0.36 gives c = {c_from_paper_mu0:.2f}, not the printed 1.08 "
        f"(1.08 implies mu_0 = {paper['c'] / math.sqrt(math.log(paper['items'])):.3f}).",
        f"Eigenvalues of P~: lambda_1 = {row['lambda_1']:.6f}, lambda_{q} = {row['lambda_q']:.4f}.",
        "",
        "mu_0 over the top-q' eigenvectors (non-decreasing in q'):",
        "",
        "| q' | mu_0 | c | item of the max | eigenvector j of the max | lambda_j | gap to neighbours / lambda_j |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in prefixes.itertuples():
        lines.append(
            f"| {r.q} | {r.mu_0:.3f} | {r.c:.3f} | {r.argmax_item} | {r.argmax_vector} | {r.eigenvalue:.4f} | "
            f"{r.rel_gap:.1e} |"
        )
    lines += [
        "",
        "An eigenvector is unique up to sign when its eigenvalue is simple, so a top-q' mu_0 whose maximising "
        "eigenvector has a clear gap to its neighbours is a lower bound of max|U_ij| for any full eigenbasis U.",
    ]
    lines += [
        "",
        "The full-U mu_0 and mu_1 are not computed: P~ is 40,981 x 40,981 with rank <= 29,858, so its null space "
        "(dimension >= 11,123) has no preferred basis and max|U_ij| depends on the eigensolver's choice there.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Table 1's Gowalla row (DP power method paper)")
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH, help="folder with train/valid/test.txt")
    parser.add_argument(
        "--q", type=int, default=128, help="top eigenvectors of P~ used for mu_0, mu_1 (256: about 4x longer)"
    )
    parser.add_argument("--seed", type=int, default=0, help="ARPACK start vector seed")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.q < 1:
        parser.error("--q must be >= 1")
    row, prefixes = table1_row(args.path, q=args.q, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(
        [
            {"source": "paper", **{k: PAPER_TABLE1[k] for k in PAPER_TABLE1}},
            {"source": f"ours_top{args.q}", **{k: row[k] for k in PAPER_TABLE1}},
        ]
    )
    write_file(args.out / "table1.csv", plain_frame(table).to_csv(index=False, float_format="%.6g"))
    write_file(args.out / "mu0_by_q.csv", plain_frame(prefixes).to_csv(index=False, float_format="%.6g"))
    text = _markdown(row, prefixes, args.path)
    write_file(args.out / "table1.md", text)
    print(text)
    print(f"({row['seconds']:.0f} s) wrote {args.out}/table1.md, table1.csv, mu0_by_q.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
