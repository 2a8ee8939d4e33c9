"""The compiled kernels of a ``.bed`` file's products (fl_strategies/kernels/bed_tables.py) give the
numbers of the numpy decode (``BedVariants.compiled = False``) on random bytes with missing calls, whatever the
people (padding), subset, aligned list (dropped, flipped, reordered variants), block and threads."""

from __future__ import annotations

import numpy as np
import pytest

from fl_strategies.kernels import bed_tables
from fl_strategies.kernels.rows import BedVariants

pytestmark = pytest.mark.skipif(not bed_tables.available(), reason="numba is not installed")


def random_bed(people: int, variants: int, seed: int, missing: float = 0.05) -> np.ndarray:
    """The bytes of a ``.bed`` (variants, ceil(people / 4)): random codes, ``missing`` of them ``01``, a variant
    without a call, padding codes ``00``."""
    rng = np.random.default_rng(seed)
    width = -(-people // 4)
    codes = rng.choice(np.array([0, 2, 3], dtype=np.uint8), size=(variants, 4 * width), p=[0.2, 0.3, 0.5])
    codes[rng.random(codes.shape) < missing] = 1
    codes[3] = 1
    codes[:, people:] = 0
    return (codes[:, 0::4] | codes[:, 1::4] << 2 | codes[:, 2::4] << 4 | codes[:, 3::4] << 6).astype(np.uint8)


def both(X: BedVariants, call):
    """``call(X)`` with the table kernel and with the numpy decode."""
    X.compiled = True
    tables = call(X)
    X.compiled = False
    numpy = call(X)
    X.compiled = True
    return tables, numpy


def assert_same(tables, numpy):
    """Equal to round-off (1e-12 of the largest entry); tuples entry by entry."""
    if isinstance(numpy, tuple):
        assert len(tables) == len(numpy)
        for got, want in zip(tables, numpy):
            assert_same(got, want)
        return
    want = np.asarray(numpy, dtype=float)
    np.testing.assert_allclose(tables, want, rtol=0, atol=1e-12 * max(1.0, float(np.abs(want).max())))


def test_numba_is_there_and_the_products_use_its_kernels(monkeypatch):
    """The compiled kernels are the default where numba is installed (a dependency): ``left``, the row squares
    and ``right`` never ask for a decoded block."""
    X = BedVariants(random_bed(21, 30, 0), 21)
    assert BedVariants.compiled and X.compiled
    expected = both(X, lambda X: X.left(np.ones((30, 2)), np.full(30, 0.7), np.full(30, 1.3)))[1]
    monkeypatch.setattr(BedVariants, "_passes", lambda *args, **kwargs: pytest.fail("decoded a block"))
    assert_same(X.left(np.ones((30, 2)), np.full(30, 0.7), np.full(30, 1.3)), expected)
    X.row_squares(np.full(30, 0.7))
    monkeypatch.undo()
    Y, dense = np.ones((21, 2)), np.asarray(X)
    monkeypatch.setattr(BedVariants, "_passes", lambda *args, **kwargs: pytest.fail("decoded a block"))
    assert_same(X.right(Y, np.full(30, 0.7)), np.nan_to_num(dense - 0.7).T @ Y)


@pytest.mark.parametrize("people,threads,block", [(29, 1, 5), (30, 2, 3), (31, 2, 64), (32, 1, 1), (4105, 2, 7)])
def test_left_products_and_row_squares_agree_with_the_numpy_decode(people, threads, block):
    variants = 41
    rng = np.random.default_rng(people)
    X = BedVariants(random_bed(people, variants, people), people)
    X.product_block, X.right_block, X.threads = block, block, threads
    mean, scale = rng.uniform(0.2, 1.8, variants), rng.uniform(0.5, 2.0, variants)
    Z = rng.standard_normal((variants, 3))
    assert_same(*both(X, lambda X: X.left(Z, mean, scale)))
    assert_same(*both(X, lambda X: X.left(Z)))  # the counts, a missing call 0
    assert_same(*both(X, lambda X: X.left(Z[:, 0], mean)))  # a vector
    Y = rng.standard_normal((people, 3))
    assert_same(*both(X, lambda X: X.right(Y, mean, scale)))
    assert_same(*both(X, lambda X: X.right(Y)))
    wide = rng.standard_normal((people, 10))  # past the eight columns the right kernel sums at a time
    assert_same(*both(X, lambda X: X.right(wide, mean, scale)))
    assert_same(*both(X, lambda X: X.right(wide[:, 0], mean)))  # a vector
    assert_same(*both(X, lambda X: X.row_squares(mean, scale)))
    assert_same(*both(X, lambda X: X.row_squares(mean)))
    assert_same(*both(X, lambda X: X._left(Z, None, scale, None, squares=True)))
    assert_same(*both(X, lambda X: X.missingness_diagonal(Z, mean, scale)[0]))
    W = X.weighted(rng.uniform(0.5, 2.0, people))
    assert_same(*both(W, lambda W: W.summary(Z, mean, scale, diagonal=True)[:2]))
    assert_same(*both(W, lambda W: W.product(Z, mean, scale)))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_subset_of_an_aligned_list_agrees_with_the_numpy_decode(threads):
    """Dropped, flipped and reordered variants (:meth:`aligned`) and a subset of people (:meth:`subset`), either
    way round."""
    people, variants = 37, 50
    rng = np.random.default_rng(threads)
    X = BedVariants(random_bed(people, variants, 7, missing=0.15), people)
    columns = rng.permutation(variants)
    columns[[2, 11, 12, 49]] = -1
    kept = columns >= 0
    order = np.where(kept, np.argsort(np.argsort(np.where(kept, columns, 99))), -1)
    flip = rng.random(variants) < 0.4
    chosen = np.sort(rng.choice(people, 23, replace=False))
    for Y in (X.aligned(order, flip, int(kept.sum())).subset(chosen),
              X.subset(chosen).aligned(order, flip, int(kept.sum()))):
        Y.product_block, Y.right_block, Y.threads = 6, 6, threads
        d = Y.dimension
        mean, scale = rng.uniform(0.2, 1.8, d), rng.uniform(0.5, 2.0, d)
        Z = rng.standard_normal((d, 4))
        assert Y.left(Z, mean, scale).shape == (23, 4)
        assert_same(*both(Y, lambda Y: Y.left(Z, mean, scale)))
        assert_same(*both(Y, lambda Y: Y.left(Z)))
        V = rng.standard_normal((23, 2))
        assert_same(*both(Y, lambda Y: Y.right(V, mean, scale)))
        assert_same(*both(Y, lambda Y: Y.right(V)))
        assert_same(*both(Y, lambda Y: Y.row_squares(mean, scale)))
        assert_same(*both(Y, lambda Y: Y.product(Z, mean, scale)))
        # and the dense rows: the listed counts, flipped, a missing call the mean
        dense = np.asarray(Y)
        centred = np.nan_to_num((dense - mean) / scale, nan=0.0)
        np.testing.assert_allclose(Y.left(Z, mean, scale), centred @ Z, rtol=0, atol=1e-12)
        np.testing.assert_allclose(Y.right(V, mean, scale), centred.T @ V, rtol=0, atol=1e-12)


def test_opening_a_bed_reads_its_codes_on_first_use_only(tmp_path, monkeypatch):
    """Opening a ``.bed`` (as the command-line checks do, for its shape) does not count its codes; the counts,
    the missing calls and the products read the file once, on first use, and an aligned list or a subset finds
    the file's missing calls in the file's own order first."""
    from fl_strategies.files.data_files import open_samples

    people, variants = 13, 9
    raw = random_bed(people, variants, 3, missing=0.2)
    (tmp_path / "g.bed").write_bytes(b"\x6c\x1b\x01" + raw.tobytes())
    (tmp_path / "g.fam").write_text("".join(f"f{i} i{i} 0 0 0 -9\n" for i in range(people)))
    (tmp_path / "g.bim").write_text("".join(f"1 v{j} 0 {j + 1} A C\n" for j in range(variants)))
    counted = []
    original = BedVariants._count_codes
    monkeypatch.setattr(BedVariants, "_count_codes", lambda self: counted.append(1) or original(self))
    X = open_samples(str(tmp_path / "g.bed"))
    assert X.shape == (people, variants) and counted == []
    eager = BedVariants(raw, people)
    eager._count_codes()
    np.testing.assert_array_equal(X.code_counts, eager.code_counts)
    assert len(counted) == 2  # eager's and X's, once
    np.testing.assert_array_equal(X.missing_people, eager.missing_people)
    X.left(np.ones((variants, 1)), np.full(variants, 0.5))
    assert len(counted) == 2
    fresh = BedVariants(raw, people)
    fresh.product_block, fresh.threads = 2, 2  # both threads start before the codes are counted: one count
    for compiled in (True, False):
        fresh.compiled = compiled
        fresh.left(np.ones((variants, 1)), np.full(variants, 0.5))
        fresh.right(np.ones((people, 1)), np.full(variants, 0.5))
    assert len(counted) == 3
    lazy = BedVariants(raw, people).aligned(np.arange(variants)[::-1], np.zeros(variants, dtype=bool), variants)
    np.testing.assert_array_equal(lazy.missing_ptr, eager.missing_ptr)  # the file's order, not the list's
    np.testing.assert_array_equal(lazy.code_counts, eager.code_counts[::-1])
    with pytest.raises(AttributeError):
        X.no_such_attribute


def _counted(raw: np.ndarray, people: int, compiled: bool, threads: int, subset=None, aligned=None) -> dict:
    """Everything a first count finds, counted by the compiled kernels or by numpy."""
    X = BedVariants(raw, people)
    X.compiled, X.threads = compiled, threads
    X._count_codes()  # the file's own count (it locates the missing calls)
    found = {"code_counts": X.code_counts, "person_calls": X.person_calls, "missing_ptr": X.missing_ptr,
             "missing_people": X.missing_people}
    if subset is not None:
        part = X.subset(subset)
        found.update(subset_counts=part.code_counts, subset_calls=part.person_calls)
    if aligned is not None:
        listed = X.aligned(*aligned)
        found.update(aligned_counts=listed.code_counts, aligned_calls=listed.person_calls)
    return found


@pytest.mark.parametrize("people", [1, 4, 21, 1003])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_compiled_count_of_codes_is_numpy_s(people, threads):
    """The first read of a file (code counts, each person's calls, where the missing calls are, in the same order)
    by the compiled kernels equals numpy's, integer for integer: padding people, a variant without a call, more
    than 63 bytes a row and 255 variants a block, a subset, an aligned list with flipped and dropped variants."""
    variants = 600
    raw = random_bed(people, variants, seed=people + threads)
    rng = np.random.default_rng(people)
    subset = np.sort(rng.choice(people, size=max(1, people // 3), replace=False))
    columns = rng.permutation(variants)
    columns[::7] = -1
    kept = np.flatnonzero(columns >= 0)
    columns[kept] = np.argsort(np.argsort(columns[kept]))  # 0 .. len(kept) - 1
    flip = rng.random(variants) < 0.3
    compiled = _counted(raw, people, True, threads, subset, (columns, flip, kept.size))
    numpy = _counted(raw, people, False, threads, subset, (columns, flip, kept.size))
    assert compiled.keys() == numpy.keys()
    for key in numpy:
        assert compiled[key].dtype == numpy[key].dtype, key
        np.testing.assert_array_equal(compiled[key], numpy[key], err_msg=key)
    assert compiled["missing_people"].size > 0


def test_the_left_kernel_alone_is_compiled_with_the_slp_vectorizer_and_numba_s_setting_is_put_back(monkeypatch):
    """``left_block`` asks for LLVM's SLP vectorizer (numba's process-wide setting, off by default) whenever it is
    compiled, for its first arguments and for arguments of new types; the other kernels compile without it; the
    setting is back to what it was after each compilation, and a call that compiles nothing changes nothing."""
    import numba
    from numba.core import config

    seen = []

    class Dispatcher:  # stands for numba's: records the setting each call runs with, "compiles" new types
        def __init__(self, function):
            self.overloads, self.can_compile = set(), True

        def disable_compile(self, value=True):
            self.can_compile = not value

        def __call__(self, *args):
            types = tuple(numba.typeof(arg) for arg in args)
            if types not in self.overloads:
                if not self.can_compile:  # numba refuses either way, depending on the types it could convert
                    if args[0].dtype == np.float32:
                        raise RuntimeError("compilation disabled")
                    raise TypeError(f"No matching definition for argument type(s) {types}")
                self.overloads.add(types)
            seen.append(config.SLP_VECTORIZE)

    monkeypatch.setattr(numba, "njit", lambda **options: Dispatcher)
    before = config.SLP_VECTORIZE
    for slp in (True, False):
        kernel = bed_tables._Kernel(lambda x: None, slp=slp)
        kernel(np.zeros(3))  # compiles
        kernel(np.zeros(4))  # the same types: runs as compiled
        kernel(np.zeros(3, dtype=np.int64))  # new types: compiles again
        kernel(np.zeros(3, dtype=np.float32))  # and again, numba's other refusal
    assert seen == [1, before, 1, 1, 0, before, 0, 0] and config.SLP_VECTORIZE == before
    assert bed_tables.left_block.slp and not bed_tables.right_block.slp and not bed_tables.count_block.slp
