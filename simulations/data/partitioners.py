"""Split the rows of a dataset among federated clients.

:func:`partition` returns one sorted int64 index array per client. The arrays
are disjoint, their union is ``range(num_rows)`` and none is empty.

Schemes (config key ``"partitioner"``):

``"iid"``
    Seeded random permutation cut into near-equal blocks.
``"contiguous"``
    Consecutive near-equal blocks of ``0..num_rows-1`` (no randomness).
``"label"``
    Rows sorted by label (stable) and cut into near-equal consecutive blocks
    (cuts snap to a nearby class boundary), so with balanced classes each
    client holds one or two labels.
``"dirichlet"``
    Label skew: each class is split among clients with proportions drawn from
    ``Dirichlet(alpha * ones(num_clients))`` (config key ``"dirichlet-alpha"``).
``"group"``
    One client per distinct value of ``groups`` (e.g. Model II layers).
"""

from __future__ import annotations

import difflib

import numpy as np

PARTITIONERS = ("iid", "contiguous", "linear", "label", "dirichlet", "group")
"""Partition schemes accepted by :func:`partition`."""


def partition(
    scheme: str,
    num_rows: int,
    num_clients: int,
    *,
    labels: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    alpha: float = 0.5,
    seed: int = 0,
) -> list[np.ndarray]:
    """Assign every row to exactly one client.

    Parameters
    ----------
    scheme : str
        Config key ``"partitioner"``; one of :data:`PARTITIONERS`.
    num_rows : int
        Number of rows ``n`` to distribute, ``n >= 1``.
    num_clients : int
        Config key ``"num-clients"``; ``1 <= num_clients <= num_rows``.
    labels : np.ndarray of shape (n,), optional
        Integer class labels; required by ``"label"`` and ``"dirichlet"``.
    groups : np.ndarray of shape (n,), optional
        Row owners; required by ``"group"``, which needs exactly
        ``num_clients`` distinct values (client ``j`` gets the ``j``-th
        smallest value).
    alpha : float, default 0.5
        Config key ``"dirichlet-alpha"``, ``alpha > 0``; smaller is more skewed.
        Used only by ``"dirichlet"``.
    seed : int, default 0
        Seed for ``np.random.default_rng``; used by ``"iid"`` and ``"dirichlet"``.

    Returns
    -------
    list of np.ndarray
        ``num_clients`` int64 arrays of row indices, each sorted ascending.

    Raises
    ------
    ValueError
        On an unknown scheme, invalid client count, missing labels/groups, a
        bad ``alpha``, or if some client would receive no rows.
    """
    _check_scheme(scheme)
    num_rows, num_clients = _check_counts(num_rows, num_clients)
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        parts = np.array_split(rng.permutation(num_rows), num_clients)
    elif scheme == "contiguous":
        parts = np.array_split(np.arange(num_rows), num_clients)
    elif scheme == "linear":  # uneven: client i holds a block of ~ (i + 1) units (FAPS paper, Sec. 5.7)
        units = np.cumsum(np.arange(1, num_clients + 1)) / (num_clients * (num_clients + 1) / 2)
        ends = np.round(units * num_rows).astype(np.int64)[:-1]
        i = np.arange(num_clients - 1)
        ends = np.clip(ends, i + 1, num_rows - (num_clients - 1 - i))  # at least one row each
        parts = np.split(np.arange(num_rows), ends)
    elif scheme == "label":
        labels = _check_labels(scheme, labels, num_rows)
        parts = _label_parts(labels, num_clients)
    elif scheme == "dirichlet":
        labels = _check_labels(scheme, labels, num_rows)
        parts = _dirichlet_parts(labels, num_clients, _check_alpha(alpha), rng)
    else:  # "group"
        parts = _group_parts(groups, num_rows, num_clients)
    parts = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    _check_nonempty(parts, scheme)
    return parts


# ---------------------------------------------------------------------------
# Schemes
# ---------------------------------------------------------------------------


def _label_parts(labels: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Cut the label-sorted rows into near-equal consecutive blocks.

    Rows are sorted by label (stable). The cut between two blocks starts at
    the ``np.array_split`` position; if a class boundary lies within a quarter
    of the smallest block size of it, the cut is moved onto that boundary (the
    nearest one, the lower one on ties), so no client gets a small sliver of
    a class. Blocks therefore differ from equal size by at most half a block
    and are never empty. With roughly balanced classes and ``num_clients``
    near the number of classes, each client holds one or two labels.
    """
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    boundaries = np.flatnonzero(sorted_labels[1:] != sorted_labels[:-1]) + 1
    min_block = len(labels) // num_clients
    tolerance = min_block // 4
    cuts = np.cumsum([len(b) for b in np.array_split(order, num_clients)])[:-1]
    if boundaries.size:
        for j, cut in enumerate(cuts):
            nearest = boundaries[np.argmin(np.abs(boundaries - cut))]
            if abs(nearest - cut) <= tolerance:
                cuts[j] = nearest
    return np.split(order, cuts)


def _dirichlet_parts(
    labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Split each class with Dirichlet proportions, then repair empty clients.

    For each class (in ascending label order) the class's rows are shuffled,
    proportions ``p ~ Dirichlet(alpha * ones(num_clients))`` are drawn, and
    the rows are cut at ``floor(cumsum(p) * count)``.
    """
    buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for label in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == label))
        proportions = _dirichlet(rng, alpha, num_clients)
        cuts = (np.cumsum(proportions)[:-1] * len(rows)).astype(np.int64)
        for client, chunk in enumerate(np.split(rows, cuts)):
            buckets[client].append(chunk)
    parts = [np.concatenate(chunks).astype(np.int64) for chunks in buckets]
    return _fill_empty_clients(parts)


def _dirichlet(rng: np.random.Generator, alpha: float, size: int) -> np.ndarray:
    """Dirichlet draw, falling back to a random one-hot vector on underflow."""
    p = rng.dirichlet(np.full(size, alpha))
    if not np.all(np.isfinite(p)) or p.sum() <= 0:
        p = np.zeros(size)
        p[rng.integers(size)] = 1.0
    return p


def _fill_empty_clients(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Give each empty client one row taken from the currently largest client.

    Deterministic: empty clients are filled in index order; the donor is the
    largest client (lowest index on ties) and gives up its largest row index.
    Always succeeds when ``num_rows >= num_clients``: while some client is
    empty, the largest one has at least two rows.
    """
    parts = [np.sort(p) for p in parts]
    for client, part in enumerate(parts):
        if part.size:
            continue
        donor = int(np.argmax([p.size for p in parts]))
        if parts[donor].size < 2:
            break  # cannot happen when num_rows >= num_clients; reported later
        parts[client] = parts[donor][-1:]
        parts[donor] = parts[donor][:-1]
    return parts


def _group_parts(groups, num_rows: int, num_clients: int) -> list[np.ndarray]:
    """One client per distinct group value, in ascending value order."""
    if groups is None:
        raise ValueError(
            "partitioner 'group' needs a dataset with row groups, e.g. "
            "fedpower-model2; use another \"partitioner\" for this dataset"
        )
    groups = _as_row_vector("groups", groups, num_rows)
    values, owner = np.unique(groups, return_inverse=True)
    if len(values) != num_clients:
        raise ValueError(
            f'"num-clients" is {num_clients} but partitioner \'group\' found '
            f"{len(values)} distinct groups; set \"num-clients\" to {len(values)}"
        )
    return [np.flatnonzero(owner == j) for j in range(num_clients)]


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _check_scheme(scheme) -> None:
    if scheme in PARTITIONERS:
        return
    message = (
        f'"partitioner" is {scheme!r}, which is not a known scheme; use one of '
        f"{', '.join(PARTITIONERS)}"
    )
    if isinstance(scheme, str):
        close = difflib.get_close_matches(scheme, PARTITIONERS, n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
    raise ValueError(message)


def _check_counts(num_rows, num_clients) -> tuple[int, int]:
    if isinstance(num_rows, bool) or not isinstance(num_rows, (int, np.integer)) or num_rows < 1:
        raise ValueError(f"the dataset must have at least 1 row to partition, got num_rows={num_rows!r}")
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)):
        raise ValueError(f'"num-clients" must be an integer, got {num_clients!r}')
    if not 1 <= num_clients <= num_rows:
        raise ValueError(
            f'"num-clients" is {num_clients} but must be between 1 and the '
            f"number of rows ({num_rows}) so that every client gets a row"
        )
    return int(num_rows), int(num_clients)


def _check_labels(scheme: str, labels, num_rows: int) -> np.ndarray:
    if labels is None:
        raise ValueError(
            f"partitioner {scheme!r} needs a dataset with labels, e.g. digits; "
            "choose another \"partitioner\" for this dataset"
        )
    return _as_row_vector("labels", labels, num_rows)


def _as_row_vector(what: str, values, num_rows: int) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != (num_rows,):
        raise ValueError(f"{what} must have shape ({num_rows},), got {values.shape}")
    return values


def _check_alpha(alpha) -> float:
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f'"dirichlet-alpha" must be a number > 0, got {alpha!r}') from None
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f'"dirichlet-alpha" is {alpha!r} but must be a finite number > 0')
    return value


def _check_nonempty(parts: list[np.ndarray], scheme: str) -> None:
    for client, part in enumerate(parts):
        if part.size == 0:
            raise ValueError(
                f"partitioner {scheme!r} would leave client {client} with no rows; "
                f"use fewer \"num-clients\" (now {len(parts)}) or another \"partitioner\""
            )
