"""The data digest of a node-secret noise draw (fl_strategies/privacy/noise.py) is hashed in row blocks, with the
digest of the one-piece formula it replaced (so every noise draw is unchanged), without copying a memory-mapped
file into memory, and once per process and file version for a read-only memory-mapped file."""

from __future__ import annotations

import gc
import hashlib
import os
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import fl_strategies.privacy.noise as noise
from fl_strategies.kernels.rows import BLOCK_BYTES


def one_piece_digest(value) -> bytes:
    """The formula before block hashing: the whole array's bytes in C order, in one ``tobytes`` copy."""
    h = hashlib.blake2b(digest_size=32)
    if hasattr(value, "tocsr"):
        value = value.tocsr()
        for part in (value.data, value.indices, value.indptr):
            h.update(np.ascontiguousarray(part).tobytes())
        h.update(repr(value.shape).encode())
    elif isinstance(value, np.ndarray):
        h.update(repr((value.dtype.str, value.shape)).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())
    return h.digest()


def int8_file(path, shape, seed=0) -> np.memmap:
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int8, shape=shape)
    rng = np.random.default_rng(seed)
    for start in range(0, shape[0], 4096):  # filled a slab at a time: the test itself holds no full copy
        out[start:start + 4096] = rng.integers(-128, 128, size=out[start:start + 4096].shape, dtype=np.int8)
    out.flush()
    del out
    return np.load(path, mmap_mode="r")


def arrays(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((37, 11))
    memmap = int8_file(tmp_path / "rows.npy", (53, 13))
    return {
        "C float64": base, "Fortran": np.asfortranarray(base), "transposed": base.T, "strided": base[::3, 1::2],
        "negative stride": base[::-1], "big-endian": base.astype(">f4"), "int8": base.astype(np.int8),
        "bool": base > 0, "3-D": rng.standard_normal((4, 5, 6)), "1-D": base[:, 2], "0-D": np.array(2.5),
        "empty": np.zeros((0, 4)), "no columns": np.zeros((3, 0)), "memmap": memmap, "memmap view": memmap[5:40, ::2],
        "memmap transposed": memmap.T,
    }


def test_the_digest_is_the_one_piece_formulas(tmp_path):
    for name, value in arrays(tmp_path).items():
        assert noise._digest(value) == one_piece_digest(value), name
        for block_bytes in (1, 40, 1000):  # many blocks, down to one row each
            h = hashlib.blake2b(digest_size=32)
            h.update(repr((value.dtype.str, value.shape)).encode())
            noise._hash_array(h, value, block_bytes)
            assert h.digest() == one_piece_digest(value), (name, block_bytes)
    csr = sp.random(40, 30, density=0.2, random_state=3, format="csr")
    for value in (csr, csr.tocsc(), csr.tocoo()):
        assert noise._digest(value) == one_piece_digest(value)
    for value in (0.25, "mean", 3, None):
        assert noise._digest(value) == one_piece_digest(value)
    # and a release's draw is the one the old formula keyed: same key bytes, same noise
    data = arrays(tmp_path)["memmap"]
    noisy = noise.ClientNoise({"noise-source": "node-secret", "seed": 0}, {}, 1, lambda draw: bytes(32), True, 2)
    X = np.arange(12.0).reshape(6, 2)
    key = hashlib.blake2b(digest_size=32, key=bytes(32), person=b"fedspectral-nz1")
    key.update(b"1/4/3")
    for value in (X, data, 0.5):
        key.update(one_piece_digest(value))
    np.testing.assert_array_equal(noisy.generator(4, X, data, 0.5).standard_normal((5, 3)),
                                  noise.KeyedNormal(key.digest()).standard_normal((5, 3)))


def peak_traced(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_hashing_a_memory_mapped_file_does_not_copy_it(tmp_path):
    data = int8_file(tmp_path / "big.npy", (64 * 1024, 1024))  # 64 MiB of int8
    assert data.nbytes == 64 << 20
    noise._FILE_DIGESTS.clear()
    contiguous = peak_traced(lambda: noise._digest(data))
    assert contiguous < 1 << 20, contiguous  # hashed in place: no block is copied
    strided = peak_traced(lambda: noise._digest(data[:, ::2]))  # not contiguous: one block copied at a time
    assert strided <= BLOCK_BYTES + (1 << 20), strided
    assert noise._digest(data[:, ::2]) == one_piece_digest(data[:, ::2])
    # the measurement sees a whole copy: the one-piece formula peaks at the file's size
    assert peak_traced(lambda: one_piece_digest(data)) >= data.nbytes


def test_a_read_only_file_is_hashed_once_per_process_and_file_version(tmp_path, monkeypatch):
    path = tmp_path / "rows.npy"
    data = int8_file(path, (300, 20))
    hashed = []
    original = noise._hash_array
    monkeypatch.setattr(noise, "_hash_array", lambda h, a, *args: (hashed.append(a.shape), original(h, a, *args)))
    first = noise._digest(data)
    assert noise._digest(data) == first and len(hashed) == 1  # the same file array: hashed once
    other = np.load(path, mmap_mode="r")  # another array object of the same file: hashed itself
    assert noise._digest(other) == first and len(hashed) == 2
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new file version: hashed again
    assert noise._digest(data) == first and len(hashed) == 3
    # an array that can change in place is hashed at every release, and a change changes the digest
    rows = np.array(data)
    noise._digest(rows)
    rows[0, 0] += 1
    assert noise._digest(rows) != first and len(hashed) == 5
    copy_on_write = np.load(path, mmap_mode="c")  # writeable in the process: never cached
    noise._digest(copy_on_write)
    noise._digest(copy_on_write)
    assert len(hashed) == 7
    # the cache holds only live arrays: an entry goes with its array
    key = id(data)
    assert key in noise._FILE_DIGESTS
    del data
    gc.collect()
    assert key not in noise._FILE_DIGESTS


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (2, 0)])
def test_tiny_arrays(shape):
    value = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    assert noise._digest(value) == one_piece_digest(value)


def test_a_tuple_of_inputs_is_hashed_item_by_item():
    """fedpower's rows-path data (``LocalOperator.digest_input``: rows, centring, scale, weight) is a tuple; its
    ``repr`` would show the rows only by their corners, so data that differ inside must still differ here."""
    from fl_strategies.kernels.products import LocalOperator
    from fl_strategies.kernels.rows import RowBlocks

    rows = np.random.default_rng(2).standard_normal((200, 30))
    other = rows.copy()
    other[100, 15] = np.nextafter(other[100, 15], np.inf)
    a, b = (LocalOperator.from_rows(RowBlocks(m)).digest_input for m in (rows, other))
    assert isinstance(a, tuple) and repr(a) == repr(b)  # the repr cannot tell them apart
    assert noise._digest(a) != noise._digest(b)
    assert noise._digest(a) == noise._digest(LocalOperator.from_rows(RowBlocks(rows.copy())).digest_input)
    assert noise._digest((1, 2)) != noise._digest([1, 2]) != noise._digest(((1,), 2))
    noisy = noise.ClientNoise({"noise-source": "node-secret", "seed": 0}, {}, 1, lambda draw: bytes(32), True, 2)
    draws = [noisy.generator(3, data, 0.5).standard_normal(4096) for data in (a, b)]
    assert abs(np.corrcoef(*draws)[0, 1]) < 6 / np.sqrt(4096)
