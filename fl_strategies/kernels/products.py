"""The local operator of an eigenspace client: ``A_i`` applied to a ``(d, r)`` block.

``A_i = D^{-1} (M_i - 1 mu^T)^T (M_i - 1 mu^T) D^{-1} / s_i``: the client's second-moment matrix (``mu = 0``) or its
covariance about a broadcast mean ``mu`` (d,), with the columns divided by an optional ``scale`` (d,) (``D =
diag(scale)``), times an optional ``weight`` (FAPS uses ``s_i A_i``). Two ways to apply it, giving the same numbers
up to round-off:

* **rows**: ``M^T (M Z)`` over float64 row blocks (:class:`~.rows.RowBlocks`), centred by
  ``(M - 1 mu^T)^T (M - 1 mu^T) Z = M^T (M Z) - m (s mu^T Z) - mu (s m^T Z) + s mu (mu^T Z)`` with the row mean
  ``m``, never materialising the centred rows: O(s d r) time and O(d r) memory beyond the rows per product;
* **gram**: ``G = M^T M / s`` formed once, centred as ``G - m mu^T - mu m^T + mu mu^T`` once per mean:
  O(d^2) memory, O(d^2 r) time per product. Cheaper when the client has at least as many rows as columns and
  the run does many products (:func:`gram_is_cheaper`).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from .rows import RowBlocks

__all__ = ["LocalOperator", "gram_is_cheaper", "top_eigenpairs", "GRAM_FLOOR_BYTES"]

GRAM_FLOOR_BYTES = 1 << 26
"""A Gram matrix up to this size (64 MiB, d <= 2,896) may be formed even when it is larger than the rows."""


def gram_is_cheaper(num_rows: int, dimension: int, rank: int, products: int, shared: bool = False) -> bool:
    """Whether forming ``G = M^T M`` once beats ``products`` products ``M^T (M Z)`` with ``Z`` of ``rank`` columns.

    Floating-point work: rows ``2 P s d r``; Gram ``s d^2`` (once) ``+ P d^2 r``. The Gram matrix must also take
    no more memory than the rows in float64 (``d <= s``) or than :data:`GRAM_FLOOR_BYTES`. A ``shared`` Gram
    matrix (a simulation harness caches it for every run of a sweep in the process) is not charged to one run:
    it is used whenever it fits that memory rule.

    Parameters
    ----------
    num_rows, dimension : int
        ``s`` and ``d``.
    rank : int
        ``r``, columns of a product's block.
    products : int
        How many products the client expects to compute in the run.
    shared : bool
        The Gram matrix is built once for many runs.
    """
    s, d, r, P = int(num_rows), int(dimension), max(int(rank), 1), max(int(products), 1)
    if d > s and 8 * d * d > GRAM_FLOOR_BYTES:
        return False
    if shared:
        return True
    return s * d * d + P * d * d * r < 2 * P * s * d * r


_KEEPING = threading.Lock()
"""Guards the kept left products of every operator (:meth:`LocalOperator.product_keeping`)."""

_KEEPERS: "weakref.WeakSet[LocalOperator]" = weakref.WeakSet()
"""The operators that kept left products of a Krylov basis: a new basis clears the others' (one run's at a time)."""


class LocalOperator:
    """``A_i`` (d, d) as an operator: ``op @ Z``, its trace, the objective ``s tr(Z^T A_i Z)``, its dense form.

    Build one per client with :meth:`from_rows` or :meth:`from_gram`, then :meth:`centered` for a broadcast mean;
    the centred operators share the base's rows or Gram matrix (and cache the centred Gram matrix).

    Attributes
    ----------
    num_rows : int
        ``s_i``.
    path : {"rows", "gram"}
        How products are computed.
    shape : tuple
        ``(d, d)``.
    """

    def __init__(self, num_rows: int, dimension: int, *, rows: RowBlocks | None = None,
                 gram: np.ndarray | None = None, row_sum: np.ndarray | None = None,
                 mean: np.ndarray | None = None, scale: np.ndarray | None = None, weight: float = 1.0) -> None:
        if rows is None and gram is None:
            raise ValueError("a local operator needs rows or a Gram matrix")
        self.num_rows, self.shape = int(num_rows), (int(dimension), int(dimension))
        self.rows, self.gram = rows, gram
        self._row_sum = row_sum
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float64)
        self.scale = None if scale is None else np.asarray(scale, dtype=np.float64)
        self.weight = float(weight)
        self._dense: np.ndarray | None = None
        self._centered: dict[bytes, LocalOperator] = {}
        # a krylov run's kept left products: (basis id, {block j: X Q_j (s, r)}, row squares (s,) or None)
        self._kept: tuple[str, dict[int, np.ndarray], np.ndarray | None] | None = None

    # -- construction ---------------------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: RowBlocks, *, use_gram: bool = False) -> "LocalOperator":
        """The uncentred operator of ``rows``; with ``use_gram`` its products use ``M^T M / s`` formed now."""
        gram = None
        if use_gram:
            with np.errstate(all="ignore"):  # overflow is reported by the caller's finiteness check
                gram = rows.gram() / max(rows.num_rows, 1)
        return cls(rows.num_rows, rows.dimension, rows=rows, gram=gram)

    @classmethod
    def from_gram(cls, gram: np.ndarray, num_rows: int, *, rows: RowBlocks | None = None,
                  row_sum: np.ndarray | None = None) -> "LocalOperator":
        """The operator of a given ``G = M^T M / s`` (d, d); ``rows`` or ``row_sum`` make it centrable."""
        return cls(num_rows, gram.shape[0], rows=rows, gram=gram, row_sum=row_sum)

    @property
    def path(self) -> str:
        """``"gram"`` or ``"rows"``."""
        return "gram" if self.gram is not None else "rows"

    @property
    def row_sum(self) -> np.ndarray:
        """Sum of the rows, shape (d,)."""
        if self._row_sum is None:
            if self.rows is None:
                raise ValueError("the row sum is unknown: the operator was built from a Gram matrix alone")
            self._row_sum = self.rows.stats()[0]
        return self._row_sum

    def column_squares(self) -> np.ndarray:
        """Each column's sum of squares ``diag(M^T M)``, shape (d,)."""
        if self.rows is not None:
            return self.rows.stats()[1]
        return np.diag(self.gram) * self.num_rows

    def centered(self, mean: np.ndarray | None = None, scale: np.ndarray | None = None,
                 weight: float = 1.0) -> "LocalOperator":
        """This (uncentred) operator centred with ``mean`` (d,), columns divided by ``scale`` (d,), times ``weight``.

        Cached per ``(mean, scale, weight)`` (the last four): a client rebuilt at every message keeps one centred
        Gram matrix per broadcast mean.
        """
        if mean is None and scale is None and weight == 1.0:
            return self
        key = b"".join(np.asarray(v, dtype="<f8").tobytes() if v is not None else b"-" for v in (mean, scale)) + \
            repr(float(weight)).encode()
        if key not in self._centered:
            if len(self._centered) >= 4:
                self._centered.pop(next(iter(self._centered)))
            self._centered[key] = LocalOperator(self.num_rows, self.shape[0], rows=self.rows, gram=self.gram,
                                                row_sum=self._row_sum, mean=mean, scale=scale, weight=weight)
        return self._centered[key]

    # -- the maths ------------------------------------------------------------------------------------------
    def dense(self) -> np.ndarray:
        """``A_i`` as a (d, d) array (cached): from the Gram matrix, or formed from the rows."""
        if self._dense is None and self.gram is None and getattr(self.rows, "centers_inside", False):
            self._dense = self @ np.eye(self.shape[0])
        if self._dense is None:
            G = self.gram
            if G is None:
                with np.errstate(all="ignore"):
                    G = self.rows.gram() / self.num_rows
            A = G
            if self.mean is not None:
                m, mu = self.row_sum / self.num_rows, self.mean
                A = G - np.outer(m, mu) - np.outer(mu, m) + np.outer(mu, mu)
            if self.scale is not None:
                A = A / np.outer(self.scale, self.scale)
            if self.weight != 1.0:
                A = A * self.weight
            self._dense = A
        return self._dense

    def __matmul__(self, Z: np.ndarray) -> np.ndarray:
        """``A_i Z`` for ``Z`` of shape (d, r) (or (d,)); shape of ``Z``."""
        if self.gram is not None:
            return self.dense() @ Z
        s = self.num_rows
        if getattr(self.rows, "centers_inside", False):  # decoded centred and scaled, missing calls imputed
            Y = self.rows.product(Z, self.mean, self.scale) / s
            return Y * self.weight if self.weight != 1.0 else Y
        Zs = Z if self.scale is None else Z / self._col(self.scale, Z)
        Y = self.rows.product(Zs) / s
        if self.mean is not None:
            m, mu = self.row_sum / s, self.mean
            Y = Y - np.multiply.outer(m, mu @ Zs) - np.multiply.outer(mu, m @ Zs) + np.multiply.outer(mu, mu @ Zs)
        if self.scale is not None:
            Y = Y / self._col(self.scale, Y)
        return Y * self.weight if self.weight != 1.0 else Y

    # -- a krylov site's kept left products (the summary without a read) ---------------------------------------
    @property
    def keeps_lefts(self) -> bool:
        """Whether :meth:`product_keeping` applies: the rows of a ``.bed`` file, centred inside its products."""
        return self.gram is None and hasattr(self.rows, "left_with_squares")

    def product_keeping(self, Z: np.ndarray, basis: str, block: int) -> np.ndarray:
        """``self @ Z`` (d, r), the same numbers, keeping ``X Z`` (s, r) as block ``block`` of the Krylov basis
        ``basis`` (and, with block 0, its people's row squares ``||x_i||^2`` (s,) from the same read) for
        :meth:`kept_left`. A basis is kept from its block 0 on; a new one drops the blocks of every operator's
        earlier basis (one run's at a time in a process); a block sent again (a repeated round) replaces its copy.
        Memory: ``s r`` floats a block, at most the basis's blocks (``krylov-blocks``, else ``num-server-rounds``).

        Parameters
        ----------
        Z : ndarray of shape (d, r)
            The broadcast block ``Q_j``.
        basis : str
            The server's basis id (:data:`fl_strategies.files.pca.KRYLOV_BASIS`).
        block : int
            ``j``.
        """
        block = int(block)
        with _KEEPING:
            kept = self._kept if self._kept is not None and self._kept[0] == basis else None
            # a basis is kept from its block 0 on, with the row squares from that block's read: a node whose process
            # ends with each message (a SuperNode's) reads them once, and one that joins later (a resumed run, a
            # restarted basis) keeps nothing it could never use
            first = kept is None and block == 0
            if first:
                for other in list(_KEEPERS):  # another basis began: the blocks of the ones before are of no use
                    if other._kept is not None and other._kept[0] != basis:
                        other._kept = None
                _KEEPERS.add(self)
        Y, read = self.rows.left_with_squares(Z, self.mean, self.scale, squares=first)
        with _KEEPING:
            if first:
                self._kept = (basis, {0: Y}, read)
            elif kept is not None and self._kept is kept:
                kept[1][block] = Y
        weights = self.rows.row_weights
        W = Y if weights is None else Y * weights.reshape((-1,) + (1,) * (Y.ndim - 1))  # as rows.product
        out = self.rows.right(W, self.mean, self.scale) / self.num_rows
        return out * self.weight if self.weight != 1.0 else out

    def kept_left(self, basis: str, V: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(X Z, row squares)``, shapes (s, r) and (s,), for ``Z = [Q_0 ... Q_{q-1}] V`` from the blocks kept by
        :meth:`product_keeping` (``X Z = [X Q_0 ... X Q_{q-1}] V``, the same to round-off; no read of the file), or
        ``None`` where this operator kept no such blocks (another basis, a block or the squares missing: a node
        that restarted, a resumed run).

        Parameters
        ----------
        basis : str
        V : ndarray of shape (q r, r)
        """
        with _KEEPING:
            kept = self._kept
        if kept is None or kept[0] != basis or kept[2] is None:
            return None
        blocks, squares = dict(kept[1]), kept[2]
        width = next(iter(blocks.values())).shape[1] if blocks else 0
        if not width or V.shape[0] % width or any(j not in blocks for j in range(V.shape[0] // width)):
            return None
        return np.hstack([blocks[j] for j in range(V.shape[0] // width)]) @ V, squares

    @staticmethod
    def _col(v: np.ndarray, like: np.ndarray) -> np.ndarray:
        return v if like.ndim == 1 else v[:, None]

    def product(self, Z: np.ndarray) -> np.ndarray:
        """``M^T (M Z)``, unnormalised, uncentred, unscaled (dp-power's share), shape (d, r)."""
        if self.rows is None:
            return self.num_rows * (self.gram @ Z)
        return self.rows.product(Z)

    def trace(self) -> float:
        """``tr(A_i)`` (from the diagonal only on the rows path).

        A ``.bed`` file (centred inside its products) gives it from its code counts without reading the file,
        or, with row weights ``omega``, as ``sum_i omega_i ||x_i||^2`` in one read (the summary's left pass).
        """
        if self.gram is not None:
            return float(np.trace(self.dense()))
        s = self.num_rows
        if getattr(self.rows, "centers_inside", False):
            mean = np.zeros(self.shape[0]) if self.mean is None else self.mean
            if self.rows.row_weights is not None:
                return float(self.rows.row_weights @ self.rows.row_squares(mean, self.scale) / s * self.weight)
            diag = self.rows.centered_column_squares(mean) / s
        else:
            diag = self.column_squares() / s
            if self.mean is not None:
                m = self.row_sum / s
                diag = diag - 2.0 * m * self.mean + self.mean * self.mean
        if self.scale is not None:
            diag = diag / (self.scale * self.scale)
        return float(diag.sum() * self.weight)

    def objective(self, Z: np.ndarray) -> float:
        """``s_i tr(Z^T A_i Z)`` (the reported ``f_i``)."""
        return float(self.num_rows * np.sum(Z * (self @ Z)))

    def largest_eigenvalue(self) -> float:
        """``||A_i||_2`` (scipy ``eigh`` of the Gram matrix, or Lanczos ``eigsh`` on the rows)."""
        d = self.shape[0]
        if self.gram is not None or d <= 2:
            import scipy.linalg

            return float(scipy.linalg.eigh(self.dense(), eigvals_only=True, subset_by_index=[d - 1] * 2)[0])
        return float(top_eigenpairs(self, 1)[0][0])

    @property
    def digest_input(self):
        """What identifies this operator's data for a node-secret noise draw: the dense matrix on the Gram path,
        the stored rows and the centring on the rows path."""
        if self.gram is not None:
            return self.dense()
        return (self.rows.rows, None if self.mean is None else self.mean.tobytes(),
                None if self.scale is None else self.scale.tobytes(), self.weight)


def top_eigenpairs(op, k: int, extra=None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenpairs of a symmetric operator ``op`` (``op @ V``), by Lanczos (scipy ``eigsh``).

    Parameters
    ----------
    op : object with ``shape`` (d, d) and ``@``
        Symmetric; ``extra(V)`` (d, b) -> (d, b) is added to its product when given.
    k : int
        ``1 <= k < d``.

    Returns
    -------
    values : ndarray of shape (k,), descending
    vectors : ndarray of shape (d, k)
    """
    import scipy.sparse.linalg as sla

    d = op.shape[0]

    def matmat(V):
        V = np.asarray(V, dtype=np.float64)
        out = op @ V
        return out + extra(V) if extra is not None else out

    linear = sla.LinearOperator((d, d), matvec=lambda v: matmat(v.reshape(d, 1)).ravel(), matmat=matmat,
                                dtype=np.float64)
    values, vectors = sla.eigsh(linear, k=k, which="LA", tol=0.0, v0=np.ones(d) / np.sqrt(d))
    order = np.argsort(values)[::-1]
    return values[order], vectors[:, order]
