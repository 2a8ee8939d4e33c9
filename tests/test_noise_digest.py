"""The data digest of a node-secret noise draw (fl_strategies/privacy/noise.py) is hashed in row blocks, with the
digest of the one-piece formula it replaced (so every noise draw is unchanged), without copying a memory-mapped
file into memory, and once per process and file version for a read-only memory-mapped file.

The derivations are pinned to their documented formulas, each rebuilt here from ``hashlib`` directly: the
digest of a tuple of inputs, the keyed SHAKE-256 stream of normals and the keyed data fingerprint. A node's
secret file outlives the run (and the code version): a change of formula would make a resumed round draw new
noise for an answer already given (budget spent twice) and refuse the checkpoint's recorded fingerprints."""

from __future__ import annotations

import gc
import hashlib
import math
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
        "empty": np.zeros((0, 4)), "no columns": np.zeros((3, 0)), "one row": base[:1], "one row view": base[3:4, ::2],
        "memmap": memmap, "memmap view": memmap[5:40, ::2],
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


def test_a_file_rewritten_under_its_memory_map_is_hashed_again_with_its_new_bytes(tmp_path):
    """One byte rewritten in place (same size) under the very same read-only map: once the file's version
    changes, the digest is that of the new bytes, never the cached one of the old (stale data would key the
    noise of a release on data the node no longer holds). The new mtime is set explicitly: a file system's
    clock may not tick between two writes."""
    path = tmp_path / "rows.npy"
    data = int8_file(path, (40, 7))
    before = noise._digest(data)
    assert before == one_piece_digest(np.array(data))
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        old = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([old[0] ^ 0xFF]))
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert data[-1, -1] == np.int8(np.uint8(old[0] ^ 0xFF).view(np.int8))  # the map sees the new byte
    assert noise._digest(data) == one_piece_digest(np.array(data)) != before


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


class _Recorder:
    """A BLAKE2b-256 that records the size of every piece it is fed."""

    def __init__(self) -> None:
        self.h, self.sizes = hashlib.blake2b(digest_size=32), []

    def update(self, data) -> None:
        self.sizes.append(memoryview(data).nbytes)
        self.h.update(data)


@pytest.mark.parametrize("kind", ["int8 1-D", "bool column", "float64", "strided float64", "int16 3-D", "memmap"])
def test_each_hashed_block_holds_as_many_whole_rows_as_fit_in_block_bytes(tmp_path, kind):
    """Every block fed to the hash is whole rows, no more than ``block_bytes`` (or one row, when a row is larger),
    and every block but the last is full: one more row would not fit. Larger blocks would break the memory bound
    of a copied (non-contiguous) block, smaller ones feed the hash more pieces than needed."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal((29, 6))
    value = {"int8 1-D": rng.integers(-128, 128, size=301, dtype=np.int8), "bool column": base[:, :1] > 0,
             "float64": base, "strided float64": base[::2, ::3], "int16 3-D": rng.integers(0, 9, (13, 3, 2)).astype(
                 np.int16), "memmap": int8_file(tmp_path / "rows.npy", (57, 5))}[kind]
    row_bytes = value.itemsize * math.prod(value.shape[1:])
    for block_bytes in sorted({1, row_bytes - 1, row_bytes, row_bytes + 1, 2 * row_bytes - 1, 3 * row_bytes,
                               1000, 10**9} - {0}):
        h = _Recorder()
        noise._hash_array(h, value, block_bytes)
        assert h.h.digest() == hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=32).digest()
        assert sum(h.sizes) == value.nbytes and all(size % row_bytes == 0 for size in h.sizes), (block_bytes, h.sizes)
        assert max(h.sizes) <= max(block_bytes, row_bytes), (block_bytes, h.sizes)
        assert all(size + row_bytes > block_bytes for size in h.sizes[:-1]), (block_bytes, h.sizes)


def test_a_tuple_or_list_digest_is_blake2b_256_of_its_type_length_and_item_digests(tmp_path):
    """As documented (:func:`fl_strategies.privacy.noise._digest`), nested: the item digests are those of the
    one-piece formula, the container's is BLAKE2b-256 of ``"<type>/<length>"`` then the item digests."""
    rows = arrays(tmp_path)["memmap"]

    def reference(value) -> bytes:
        if isinstance(value, (tuple, list)):
            h = hashlib.blake2b(f"{type(value).__name__}/{len(value)}".encode(), digest_size=32)
            for item in value:
                h.update(reference(item))
            return h.digest()
        return one_piece_digest(value)

    for value in ((rows, 0.5, None, 3), [np.arange(4.0), (1, "two")], (), [], ((),)):
        assert noise._digest(value) == reference(value), value


def reference_normals(key: bytes, counter: int, n: int) -> np.ndarray:
    """The documented stream: SHAKE-256 of the key and the call's 8-byte big-endian counter, read as
    ``2 * ceil(n / 2)`` big-endian 64-bit words; each word's top 53 bits give the midpoint uniform
    ``(w + 1/2) 2^-53`` in (0, 1); the first half of the uniforms give the Box-Muller radii, the second the
    angles; the cosines then the sines, the first ``n`` of them."""
    pairs = -(-n // 2)
    stream = hashlib.shake_256(key + counter.to_bytes(8, "big")).digest(16 * pairs)
    words = [int.from_bytes(stream[8 * i:8 * i + 8], "big") for i in range(2 * pairs)]
    u = np.array([((w >> 11) + 0.5) / 2.0**53 for w in words], dtype=np.float64)
    radius, angle = np.sqrt(-2.0 * np.log(u[:pairs])), 2.0 * np.pi * u[pairs:]
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:n]


def test_the_keyed_stream_is_shake_256_of_key_and_counter_through_box_muller():
    """Every call continues the counter; odd, even, empty and multi-dimensional shapes (an odd count keeps the
    first ``n`` of the ``n + 1`` values); two keys."""
    for key in (bytes(32), bytes(range(32))):
        stream = noise.KeyedNormal(key)
        for counter, shape in enumerate([(5,), (4, 3), (1,), (0,), (7, 2), (2, 3, 3)]):
            n = math.prod(shape)
            np.testing.assert_array_equal(stream.standard_normal(shape), reference_normals(key, counter, n).reshape(
                shape), err_msg=f"call {counter}, shape {shape}")
        assert stream.calls == 6


def test_the_keyed_fingerprint_is_the_documented_blake2b_256_of_the_plain_one():
    """A node with a secret reports BLAKE2b-256 (64 hex characters, the length of the plain SHA-256 it keys),
    keyed with its secret, personalised ``fedspectral-fp1``, of the plain fingerprint's hex text."""
    plain = hashlib.sha256(b"the rows of a node's file").hexdigest()
    for secret in (bytes(32), bytes(range(32))):
        node = noise.ClientNoise({"noise-source": "node-secret", "seed": 0}, {}, 1, lambda draw, s=secret: s, True, 2)
        keyed = node.fingerprint(plain)
        assert keyed == hashlib.blake2b(plain.encode(), digest_size=32, key=secret,
                                        person=b"fedspectral-fp1").hexdigest()
        assert len(keyed) == len(plain) == 64
