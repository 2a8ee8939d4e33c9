"""Where a client's privacy noise comes from: the run-config key ``noise-source``.

* ``node-secret`` (what ``auto`` means on a SuperNode): the node draws a 32-byte secret from the operating
  system's entropy once and keeps it, in the file its node config names (``--node-config
  'noise-secret="/path/on/the/node"'``: created with mode 600 if absent, else read; anything but a regular
  32-byte file of the node's user with mode exactly 600 is refused before it is read,
  :mod:`fl_strategies.files.secret_files`) or, without that key, in its node state (for the run only). Each
  release's noise is a cryptographic function (BLAKE2b, then SHAKE-256 as a stream of uniforms, Box-Muller)
  of the secret and of everything the release depends on: partition id, round, the broadcast iterate, the local data, the noise
  standard deviation and the number of local steps. Hence

  - the server, which never sees the secret, cannot rebuild the noise (unlike ``seeded``);
  - a repeated or resumed round with the same input re-draws exactly the same values: its answer is the
    answer already given, and no budget is spent twice (checkpoints and resume work with private noise,
    given a ``noise-secret`` file, which survives the run);
  - any change of input (another iterate, other data, another noise level) gets independent noise, so two
    answers never share a noise draw that a difference would cancel.

  Two runs with the same run config, seed and data on nodes with the same secret file give the same answers
  (the second is a repeat, which reveals nothing new); with the secret in the node state (no ``noise-secret``
  file) every run draws a new secret and so new noise.
* ``seeded`` (what ``auto`` means in a simulation: in-process, Ray, ``simulations.compare``): noise from
  ``(seed, STREAM_NOISE, partition id, round)``, reproducible, and therefore known to the server: not private.
  On a SuperNode (a node config with ``data-path``, i.e. a deployment) a noisy run with ``seeded`` is refused;
  ``seeded-not-private`` draws the same seeded noise there on purpose (to reproduce a simulation).
* ``os``: fresh operating-system entropy at every release; private, but a repeated round draws new values
  (checkpoints refuse it).

Each client reports its source at discovery (``get_properties``), and every noisy run's rows carry it
(``noise_source``), as does its log.

:class:`ClientNoise` and :func:`run_noise_source` take the whole run configuration, not a strategy's settings:
every client builds one (``noise-source`` is read only by the strategies with a privacy target).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..files.secret_files import create_secret_file, read_secret_file
from ..kernels.rows import BLOCK_BYTES

__all__ = ["NOISE_SOURCES", "STREAM_NOISE", "SECRET_KEY", "ClientNoise", "KeyedNormal", "is_deployment",
           "resolve_source", "read_secret", "read_or_create_secret", "run_noise_source"]

NOISE_SOURCES = ("auto", "node-secret", "os", "seeded", "seeded-not-private")
STREAM_NOISE = 2
"""The seeded noise's stream tag: ``default_rng([seed, STREAM_NOISE, partition id, round])``."""
SECRET_KEY = "noise-secret"
"""Node-config key naming the node-side file that holds the node's noise secret."""
SECRET_BYTES = 32


def is_deployment(node_config: Mapping[str, Any]) -> bool:
    """A real SuperNode: its node config names its own data file (``data-path``)."""
    return "data-path" in node_config


def resolve_source(source: str, node_config: Mapping[str, Any], noisy: bool) -> str:
    """The noise source a node uses for run-config ``noise-source = source``.

    Raises
    ------
    ValueError
        ``seeded`` on a SuperNode in a noisy run (the server could rebuild the noise).
    """
    deployment = is_deployment(node_config)
    if source == "auto":
        return "node-secret" if deployment else "seeded"
    if source == "seeded" and deployment and noisy:
        raise ValueError("noise-source = \"seeded\" is refused on a SuperNode (its node config has data-path): "
                         "the noise would derive from the run seed, which the server knows, and the privacy "
                         "guarantee would be false; use noise-source = \"auto\" or \"node-secret\" (private), or "
                         "\"seeded-not-private\" to reproduce a simulation on purpose")
    return source


def read_secret(path: str | Path, label: str = f"node config {SECRET_KEY}") -> bytes:
    """The node's secret in the existing file ``path``, judged by
    :func:`fl_strategies.files.secret_files.read_secret_file` before a byte is read: a regular file (no link,
    FIFO or device), owned by the reading user, mode exactly 600, of 32 bytes.

    Raises
    ------
    ValueError
        One line naming the file (after ``label``) and what is wrong with it.
    """
    return read_secret_file(path, SECRET_BYTES, label, what=f"a {SECRET_BYTES}-byte secret (delete the file to "
                            "draw a new one)")


def read_or_create_secret(path: str | Path) -> bytes:
    """The node's secret in ``path``: read it, or create it (mode 600 from the first byte) from OS entropy.

    An existing file is judged by :func:`fl_strategies.files.secret_files.read_secret_file` before a byte is read:
    a regular file (no link, FIFO or device), owned by the node's user, mode exactly 600, of 32 bytes.

    Raises
    ------
    ValueError
        One line naming the file, if it cannot be created or read or fails a check above.
    """
    create_secret_file(path, os.urandom(SECRET_BYTES), f"node config {SECRET_KEY}")
    return read_secret(path)


class KeyedNormal:
    """Standard normal draws from a 32-byte key: SHAKE-256 output as uniforms, Box-Muller.

    A cryptographic stream: without the key the draws cannot be predicted, even from earlier ones. Each call of
    :meth:`standard_normal` continues the stream with its own counter.
    """

    def __init__(self, key: bytes) -> None:
        self.key, self.calls = key, 0

    def standard_normal(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        pairs = (n + 1) // 2
        stream = hashlib.shake_256(self.key + self.calls.to_bytes(8, "big")).digest(16 * pairs)
        self.calls += 1
        words = np.frombuffer(stream, dtype=">u8").reshape(2, pairs)
        u = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1)
        radius, angle = np.sqrt(-2.0 * np.log(u[0])), 2.0 * np.pi * u[1]
        return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:n].reshape(shape)


def _hash_array(h, array: np.ndarray, block_bytes: int = BLOCK_BYTES) -> None:
    """Feed ``array``'s bytes in C order to ``h``, a block of rows (about ``block_bytes``) at a time.

    BLAKE2b is a streaming hash, so the digest is that of ``np.ascontiguousarray(array).tobytes()`` in one
    piece, without that copy of the whole array: a C-contiguous block (any block of a memory-mapped ``.npy``
    file) is hashed in place, a non-contiguous one is copied one block at a time.
    """
    if array.ndim == 0 or array.size == 0:
        h.update(np.ascontiguousarray(array).tobytes())
        return
    row_bytes = max(1, array.itemsize * (array.size // array.shape[0]))
    step = max(1, int(block_bytes) // row_bytes)
    for start in range(0, array.shape[0], step):
        block = np.ascontiguousarray(array[start:start + step])
        h.update(block.tobytes() if block.dtype.hasobject else block.reshape(-1).view(np.uint8))
        del block  # a copied block is freed before the next one is made: one block at a time


def _file_version(array: np.ndarray) -> tuple | None:
    """``(file, mtime_ns, size)`` of a read-only memory-mapped file array, else ``None``.

    Only such an array keeps its bytes for as long as its file is unchanged: numpy refuses to make it writeable
    (its buffer is a read-only ``mmap``), so no code in the process can change it in place, and a change of the
    file on disk changes this version. Any other array may be written through (itself or another view of its
    memory), so its digest is never reused.
    """
    if not isinstance(array, np.memmap) or array.mode != "r" or array.flags.writeable or not array.filename:
        return None
    try:
        stat = os.stat(array.filename)
    except OSError:
        return None
    return array.filename, stat.st_mtime_ns, stat.st_size


_FILE_DIGESTS: dict[int, tuple[weakref.ref, tuple, bytes]] = {}
"""``id(array) -> (weak reference to it, its file version, its digest)`` for read-only memory-mapped arrays."""


def _forget(key: int, ref: weakref.ref) -> None:
    if _FILE_DIGESTS.get(key, (None,))[0] is ref:
        _FILE_DIGESTS.pop(key, None)


def _array_digest(array: np.ndarray) -> bytes:
    """The digest of one array: BLAKE2b-256 of its dtype and shape's ``repr``, then its bytes in C order.

    A node's data file (a read-only memory map, the same object for every message of a process: the node reads
    it once per process and file version, ``client_app.data``) is hashed once per process and file version; the
    cached digest is reused only for the very same array object (checked through a weak reference, dropped with
    the array) while its file's ``(mtime_ns, size)`` is unchanged, i.e. only when the bytes hashed cannot have
    changed (:func:`_file_version`), so a release never keys its noise on stale data.
    """
    version = _file_version(array)
    if version is not None:
        cached = _FILE_DIGESTS.get(id(array))
        if cached is not None and cached[0]() is array and cached[1] == version:
            return cached[2]
    h = hashlib.blake2b(digest_size=32)
    h.update(repr((array.dtype.str, array.shape)).encode())
    _hash_array(h, array)
    digest = h.digest()
    if version is not None:
        key = id(array)
        ref = weakref.ref(array, lambda r, key=key: _forget(key, r))
        _FILE_DIGESTS[key] = (ref, version, digest)
    return digest


def _digest(value: Any) -> bytes:
    """BLAKE2b-256 of one input of a release: an array's dtype, shape and bytes (:func:`_array_digest`), a scipy
    sparse matrix's CSR arrays and shape, a tuple's or list's length and the digests of its items, or any other
    value's ``repr``.

    A tuple is hashed item by item because its ``repr`` shows an array of more than 1000 entries only by its
    corners: two data sets that differ inside would key the same noise.
    """
    if isinstance(value, (tuple, list)):
        h = hashlib.blake2b(digest_size=32)
        h.update(f"{type(value).__name__}/{len(value)}".encode())
        for item in value:
            h.update(_digest(item))
        return h.digest()
    if hasattr(value, "tocsr"):  # a scipy sparse matrix
        h = hashlib.blake2b(digest_size=32)
        value = value.tocsr()
        for part in (value.data, value.indices, value.indptr):
            _hash_array(h, np.asarray(part))
        h.update(repr(value.shape).encode())
        return h.digest()
    if isinstance(value, np.ndarray):
        return _array_digest(value)
    return hashlib.blake2b(repr(value).encode(), digest_size=32).digest()


class ClientNoise:
    """One client's noise source for one message (the client is rebuilt at every message).

    Parameters
    ----------
    cfg : mapping
        Effective run config (``noise-source``, ``seed``).
    node_config : mapping
        The node's config (``data-path``, ``noise-secret``).
    partition_id : int
    stored_secret : callable
        Where the node keeps its secret for the run when the node config names no file: called with a way to
        draw a secret, it returns the one kept, keeping the fresh draw first when there is none
        (:func:`fl_strategies.protocol.node_state.secret_in_state` keeps it in the node state).
    noisy : bool
        Whether the run adds noise (``seeded`` is refused on a SuperNode only then).
    stream : int
        The seeded stream (``STREAM_NOISE``).

    Attributes
    ----------
    source : str
        ``node-secret``, ``os``, ``seeded`` or ``seeded-not-private``.
    persistent : bool
        Whether a repeated round draws the same noise in a new run (a resumed one): seeded sources, or a
        secret kept in a ``noise-secret`` file.
    """

    def __init__(self, cfg: Mapping[str, Any], node_config: Mapping[str, Any], partition_id: int,
                 stored_secret: Callable[[Callable[[], bytes]], bytes], noisy: bool, stream: int) -> None:
        self.cfg, self.node_config, self.partition_id = cfg, node_config, partition_id
        self.stored_secret, self.stream = stored_secret, stream
        self.source = resolve_source(cfg["noise-source"], node_config, noisy)
        self.persistent = self.source != "os" and (self.source != "node-secret" or SECRET_KEY in node_config)
        self._secret: bytes | None = None
        if self.source == "node-secret" and noisy:
            self._secret = self._load_secret()

    def _load_secret(self) -> bytes:
        if SECRET_KEY in self.node_config:
            return read_or_create_secret(str(self.node_config[SECRET_KEY]))
        return self.stored_secret(lambda: os.urandom(SECRET_BYTES))

    def properties(self) -> dict[str, Any]:
        """What the client reports at discovery: its source and whether its secret survives the run."""
        return {"noise-source": self.source, "noise-persistent": bool(self.persistent)}

    def fingerprint(self, digest: str) -> str:
        """What the node reports of its data's fingerprint ``digest``: keyed with its secret when it has one.

        A plain hash of the data would let the server test a guess of the data, which the noise is there to
        prevent; keyed with the node's secret (BLAKE2b, its own personalisation) it only tells the same data
        from other data, and only to a node with the same secret. Without a secret (no noise, or seeded noise,
        which the server knows anyway) it is ``digest`` itself.
        """
        if self._secret is None:
            return digest
        return hashlib.blake2b(digest.encode(), digest_size=32, key=self._secret, person=b"fedspectral-fp1").hexdigest()

    def generator(self, server_round: int, *inputs: Any):
        """The draws of one release: an object with ``standard_normal(shape)``.

        ``inputs`` are everything the release depends on (the broadcast iterate, the data, the noise level,
        the local steps); only ``node-secret`` uses them.
        """
        if self.source == "os":
            return np.random.default_rng()
        if self.source in ("seeded", "seeded-not-private"):
            return np.random.default_rng([self.cfg["seed"], self.stream, self.partition_id, int(server_round)])
        h = hashlib.blake2b(digest_size=32, key=self._secret, person=b"fedspectral-nz1")
        h.update(f"{self.partition_id}/{int(server_round)}/{len(inputs)}".encode())
        for value in inputs:
            h.update(_digest(value))
        return KeyedNormal(h.digest())


def run_noise_source(cfg: Mapping[str, Any], reported: Mapping[Any, Any]) -> str | None:
    """The ``noise_source`` of a run's rows: what the nodes reported at discovery (joined with ``+`` when they
    differ), else what the run config implies without SuperNodes; ``None`` without noise."""
    if not (cfg["epsilon"] > 0 or cfg["noise-std"] > 0):
        return None
    sources = sorted({str(props["noise-source"]) for props in reported.values()
                      if isinstance(props, Mapping) and "noise-source" in props})
    if sources:
        return "+".join(sources)
    return "seeded" if cfg["noise-source"] == "auto" else cfg["noise-source"]
