"""Python's ``repr`` of many float64 numbers, in two processes at once.

A model's weight files (``pca.score``, ``pca.eigenvec.allele``, ``pca.afreq``) hold every number as its ``repr``
(the shortest text that reads back exactly): 1.7 million numbers at 188,000 variants x 4 PCs, about a second of
CPython's float formatting, with nothing faster found that gives the same texts. The run's other core is idle then,
so :func:`float_reprs` hands the second half of a long array to a second Python process (the same interpreter,
``sys.executable -I -S``, no import of the project or of numpy), which formats it while this process formats the
first half. The texts are the same ``repr``'s by construction; the helper reports its interpreter's
version first and its texts are used only if that matches this process's and their count is right, else
(or where no process can be started) the numbers are formatted here.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np

__all__ = ["float_reprs", "IN_TWO_FROM"]

IN_TWO_FROM = 200_000
"""Numbers from which the second process is worth its start (about 20 ms against 0.3 s of formatting)."""

_HELPER = ("import sys, array\n"
           "a = array.array('d')\n"
           "a.frombytes(sys.stdin.buffer.read())\n"
           "sys.stdout.write(f'{sys.hexversion} {sys.float_repr_style}\\n' + '\\n'.join(map(repr, a.tolist())))\n")
"""The second process: the native float64 bytes on stdin, its interpreter (:func:`_interpreter`) then one ``repr``
a line."""


def _interpreter() -> str:
    """The helper's first line from this interpreter: its version and float formatting."""
    return f"{sys.hexversion} {sys.float_repr_style}"


def float_reprs(values) -> list[str]:
    """``repr`` of every number of ``values`` as a Python float, in C order (the texts of
    ``list(map(repr, values.ravel().tolist()))``), from :data:`IN_TWO_FROM` numbers on in two processes.

    Parameters
    ----------
    values : array_like of any shape, as float64 (size N)

    Returns
    -------
    list of str, length N
    """
    flat = np.ascontiguousarray(np.asarray(values, dtype=np.float64).ravel())
    if flat.size >= IN_TWO_FROM and sys.executable:
        texts = _in_two(flat)
        if texts is not None:
            return texts
    return list(map(repr, flat.tolist()))


def _in_two(flat: np.ndarray) -> list[str] | None:
    """The texts of ``flat`` (N,), its second half formatted by a helper process; ``None`` where the helper could
    not be started or did not answer with this interpreter's texts (the caller formats them all)."""
    half = flat.size // 2
    try:
        helper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    answer: list[bytes] = []

    def talk() -> None:  # the pipes' reads and writes wait without the GIL
        try:
            answer.append(helper.communicate(flat[half:].tobytes())[0])
        except (OSError, ValueError):
            pass

    talking = threading.Thread(target=talk, name="float-reprs", daemon=True)
    talking.start()
    try:
        mine = list(map(repr, flat[:half].tolist()))
    except BaseException:  # interrupted: the helper is not left running
        _stop(helper, talking)
        raise
    talking.join()
    if helper.returncode != 0 or not answer:
        return None
    version, _, body = answer[0].decode("ascii", errors="replace").partition("\n")
    theirs = body.split("\n") if body else []
    if version != _interpreter() or len(theirs) != flat.size - half:
        return None
    mine += theirs
    return mine


def _stop(helper: subprocess.Popen, talking: threading.Thread) -> None:
    """End the helper (this process is leaving with an exception) and wait for it: no process left behind."""
    helper.kill()
    talking.join()
    helper.wait()
