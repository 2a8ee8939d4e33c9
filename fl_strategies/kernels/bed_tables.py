"""Compiled (numba) kernels of a ``.bed`` file's products: ``D^T Z`` and ``D Y`` by table look-up, and the
count of its codes and missing calls (:func:`count_block`, :func:`missing_people`: a node's first read of its file).

``D`` (variants x people) holds the allele counts, ``Z`` (variants, r) a factor. No decoded copy of ``D`` is made:
four variants at a time, the codes of one person at those four variants make an 8-bit index
``c_0 + 4 c_1 + 16 c_2 + 64 c_3`` into a table ``G[idx] = A_0[c_0] + A_1[c_1] + A_2[c_2] + A_3[c_3]`` of 256 rows,
``A_k`` (4, r) what each code of variant ``k`` adds (its allele count times its row of ``Z``, and any other
per-code column such as a squared centred value), so each byte of the file costs four table rows added to four
people's rows instead of a decode to float64 and ``4 r`` multiply-adds. The table (``256 r`` floats, in cache) is
built in 336 row additions and used by every person; two such tables are used together (eight variants), so a
person's row is read and written once per eight variants (:func:`left_block`).

The caller adds what a missing call's imputed value contributes (:func:`add_missing`, from the missing calls found
with the code counts). The sums are those of the decoded product in another order: the same numbers to
round-off (``tests/test_bed_tables.py``). The right products ``D Y`` turn the look-up around
(:func:`right_block`): per byte of a variant (four people), a table of the 256 byte values' sums of those four
people's rows of ``Y``, built once per block of variants and used by every variant of it, so a variant costs one
table row per byte (``r`` additions) instead of a decode to float64 and ``4 r`` multiply-adds; the flipped
variants and the missing calls' value follow from the missing calls' rows (:func:`right_missing`).

numba is a dependency; where it cannot be imported (a platform without its wheels) :func:`available` is false and
the products decode with numpy.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["available", "left_block", "add_missing", "right_block", "right_missing", "count_block",
           "missing_people", "PEOPLE_CHUNK", "COUNT_OF_CODE", "FLIPPED_COUNT_OF_CODE"]

import importlib.util

PEOPLE_CHUNK = 2048
"""Bytes of a row (four people each) whose output rows are summed at a time (8,192 people: 512 KiB of float64 rows
at ``r = 8``, in a core's cache); each table is rebuilt per chunk (336 row additions against 8,192)."""

COUNT_OF_CODE = np.array([2.0, 0.0, 1.0, 0.0])
"""Allele count of each 2-bit code, a missing call (``01``) 0 (:data:`.rows.BED_COUNTS`)."""

FLIPPED_COUNT_OF_CODE = np.array([0.0, 0.0, 1.0, 2.0])
"""The same for a variant whose alleles a list names the other way round: ``2 - g``, a missing call 0."""

SPREAD_CODES = np.array([sum(((byte >> (2 * t)) & 3) << (8 * t) for t in range(4)) for byte in range(256)],
                        dtype=np.int64)
"""Each byte value's four 2-bit codes, code ``t`` in bits ``8 t`` and ``8 t + 1``: four spread bytes shifted by 0,
2, 4 and 6 bits and or-ed give the four people's 8-bit table indices at once (:func:`left_block`)."""


def available() -> bool:
    """Whether numba is there to compile the kernels of this module (without importing it: 0.2 s that a run
    without ``.bed`` files does not pay)."""
    return importlib.util.find_spec("numba") is not None


_COMPILING = threading.Lock()


class _Kernel:
    """A function compiled by numba without the GIL (cached on disk), for each new set of argument types on the
    first call with it: numba is imported then.

    ``slp``: compiled with LLVM's SLP vectorizer, which numba leaves off (its process-wide ``SLP_VECTORIZE``
    setting, read as each function is compiled): it turns :func:`left_block`'s eight additions of a table row into
    one vector addition (1.2x faster at 750 people), where it made :func:`right_block`'s sums slower. Every
    compilation of these kernels happens here, under one lock, with the setting switched to the kernel's and put
    back: between compilations numba's own compiling is disabled, so that a call with new argument types (a
    writable array where a read-only one was) is refused by numba and compiled here, never with whatever the
    setting is then; a call with known types goes straight to numba's dispatch.
    """

    def __init__(self, function, slp: bool = False) -> None:
        self.function, self.compiled, self.slp = function, None, slp
        self.__doc__ = function.__doc__

    def __call__(self, *args):
        compiled = self.compiled
        if compiled is not None:  # compiled with its setting for these argument types: no check of ours per call
            try:
                return compiled(*args)
            except (TypeError, RuntimeError) as ex:  # numba's refusals of new argument types, compiling disabled
                if "No matching definition" not in str(ex) and "compilation disabled" not in str(ex):
                    raise
        with _COMPILING:
            from numba import njit
            from numba.core import config

            if self.compiled is None:
                self.compiled = njit(nogil=True, cache=True)(self.function)
            before = config.SLP_VECTORIZE
            config.SLP_VECTORIZE = 1 if self.slp else 0
            self.compiled.disable_compile(False)
            try:  # compiled (or loaded from the cache) and made ready to run by this call
                return self.compiled(*args)
            finally:
                self.compiled.disable_compile(True)
                config.SLP_VECTORIZE = before


def _left_block(raw, columns, flips, Zs, centre, inverse_scale, squares, out, table):
    """``out[4 p + t] += sum_j a_j(code_jt(p))`` over the variants ``j`` of ``raw`` (k, width), uint8.

    ``code_jt(p)`` is person ``4 p + t``'s code at variant ``j`` (bits ``2 t`` of byte ``p``); what a code adds
    to a person's row (``a_j``, r or r + 1 columns) is its allele count ``g`` (:data:`COUNT_OF_CODE`, or
    :data:`FLIPPED_COUNT_OF_CODE` where ``flips[j]``; a missing call 0) times ``Zs[columns[j]]`` (r,), and with
    ``squares`` in column ``r`` also ``((g - centre) * inverse_scale)^2`` of that column (a missing call 0);
    nothing for ``columns[j] = -1``. ``out`` (4 width, r [+ 1]) float64, added to; ``table`` (2, 256, r [+ 1])
    scratch. Eight variants at a time, two tables of four (module docstring), so a person's row is read and
    written once per eight variants; :data:`PEOPLE_CHUNK` bytes of the rows at a time; a last group of fewer than
    eight reads code 0 with nothing added for the variants it lacks.
    """
    k, width, r = raw.shape[0], raw.shape[1], Zs.shape[1]
    wide = r + 1 if squares else r
    parts = np.zeros((8, 4, wide))  # the group's eight variants: what each code adds
    two, three = np.empty((16, wide)), np.empty((64, wide))  # the tables of a table's first two, three variants
    T0, T1 = table[0], table[1]
    for p0 in range(0, width, PEOPLE_CHUNK):
        for g in range(0, k, 8):
            n = min(8, k - g)
            for i in range(8):
                for code in range(4):
                    for c in range(wide):
                        parts[i, code, c] = 0.0
                column = columns[g + i] if i < n else -1
                if column < 0:
                    continue
                for code in range(4):
                    count = FLIPPED_COUNT_OF_CODE[code] if flips[g + i] else COUNT_OF_CODE[code]
                    for c in range(r):
                        parts[i, code, c] = count * Zs[column, c]
                    if squares and code != 1:  # a missing call is imputed with the centre: 0 once centred
                        value = (count - centre[column]) * inverse_scale[column]
                        parts[i, code, r] = value * value
            for h in range(2):  # table h: variants 4 h .. 4 h + 3 of the group, from the sums of two, then three
                T, P = table[h], parts[4 * h: 4 * h + 4]
                for code in range(4):
                    for low in range(4):
                        for c in range(wide):
                            two[code * 4 + low, c] = P[0, low, c] + P[1, code, c]
                for code in range(4):
                    for low in range(16):
                        for c in range(wide):
                            three[code * 16 + low, c] = two[low, c] + P[2, code, c]
                for code in range(4):
                    for low in range(64):
                        for c in range(wide):
                            T[code * 64 + low, c] = three[low, c] + P[3, code, c]
            for p in range(p0, min(p0 + PEOPLE_CHUNK, width)):
                # byte t of j0 (j1): person 4 p + t's table index of variants 0-3 (4-7), from each byte's spread codes
                s1 = SPREAD_CODES[raw[g + 1, p]] if n > 1 else np.int64(0)
                s2 = SPREAD_CODES[raw[g + 2, p]] if n > 2 else np.int64(0)
                s3 = SPREAD_CODES[raw[g + 3, p]] if n > 3 else np.int64(0)
                s4 = SPREAD_CODES[raw[g + 4, p]] if n > 4 else np.int64(0)
                s5 = SPREAD_CODES[raw[g + 5, p]] if n > 5 else np.int64(0)
                s6 = SPREAD_CODES[raw[g + 6, p]] if n > 6 else np.int64(0)
                s7 = SPREAD_CODES[raw[g + 7, p]] if n > 7 else np.int64(0)
                j0 = SPREAD_CODES[raw[g, p]] | (s1 << 2) | (s2 << 4) | (s3 << 6)
                j1 = s4 | (s5 << 2) | (s6 << 4) | (s7 << 6)
                for t in range(4):
                    i0, i1 = (j0 >> (8 * t)) & 255, (j1 >> (8 * t)) & 255
                    row = 4 * p + t
                    for c in range(0, wide - 7, 8):  # eight columns as one vector addition (slp: _Kernel)
                        o, A, B = out[row, c:c + 8], T0[i0, c:c + 8], T1[i1, c:c + 8]
                        t0, t1, t2, t3 = A[0] + B[0], A[1] + B[1], A[2] + B[2], A[3] + B[3]
                        t4, t5, t6, t7 = A[4] + B[4], A[5] + B[5], A[6] + B[6], A[7] + B[7]
                        o[0] += t0
                        o[1] += t1
                        o[2] += t2
                        o[3] += t3
                        o[4] += t4
                        o[5] += t5
                        o[6] += t6
                        o[7] += t7
                    for c in range(wide - wide % 8, wide):
                        out[row, c] += T0[i0, c] + T1[i1, c]


def _add_missing(ptr, people, start, stop, columns, rows, out):
    """``out[people[m]] += rows[columns[j]]`` for every missing call ``m`` of the file's variants ``j`` in
    ``start .. stop - 1`` (``ptr[j] <= m < ptr[j + 1]``) whose column ``columns[j - start]`` is not -1.

    ``rows`` (d, r): what a missing call of each column adds (its imputed value times its row of ``Z``);
    ``out`` (4 width, r) over the file's people, added to; its first ``r`` columns when it has more.
    """
    r = rows.shape[1]
    for j in range(start, stop):
        column = columns[j - start]
        if column < 0:
            continue
        for m in range(ptr[j], ptr[j + 1]):
            person = people[m]
            for c in range(r):
                out[person, c] += rows[column, c]


left_block = _Kernel(_left_block, slp=True)
add_missing = _Kernel(_add_missing)


def _right_block(raw, columns, Y4, people_chunk, out, tables):
    """``out[columns[j]] = sum_p T_p[raw[j, p]]`` for the variants ``j`` of ``raw`` (k, width), uint8, whose
    column ``columns[j]`` is not -1 (set, not added): ``D_j Y`` of :func:`right_missing`'s ``D`` before its
    missing calls, flips and fill.

    ``T_p`` (256, r) is what byte ``p`` adds for each of its values: ``sum_t g(code_t) Y4[4 p + t]`` over its four
    people ``t`` (:data:`COUNT_OF_CODE`: a missing call 0), built from ``Y4`` (4 width, r) float64 (zero rows for
    people outside the product and for a last byte's padding; ``r`` a multiple of 8) in 336 row additions.
    ``people_chunk`` bytes' tables at a time (``tables`` (people_chunk * 256, r) scratch, meant to fit a core's
    cache); for each chunk every variant's row of ``out`` (d, r) is read and written once, its sums over the
    chunk's bytes kept in eight scalars per eight columns (registers: 1.5x faster than a loop over ``r`` here).
    """
    k, width, r = raw.shape[0], raw.shape[1], Y4.shape[1]
    for j in range(k):
        column = columns[j]
        if column >= 0:
            for c in range(r):
                out[column, c] = 0.0
    for p0 in range(0, width, people_chunk):
        n = min(people_chunk, width - p0)
        for q in range(n):
            T = tables[256 * q:256 * (q + 1)]
            base = 4 * (p0 + q)
            for code in range(4):
                for c in range(r):
                    T[code, c] = COUNT_OF_CODE[code] * Y4[base, c]
            size = 4
            for t in range(1, 4):  # rows code * size + low from rows low, written last for code 0 (in place)
                for code in range(3, -1, -1):
                    count = COUNT_OF_CODE[code]
                    for low in range(size):
                        for c in range(r):
                            T[code * size + low, c] = T[low, c] + count * Y4[base + t, c]
                size *= 4
        for j in range(k):
            column = columns[j]
            if column < 0:
                continue
            for c in range(0, r, 8):
                T8 = tables[:, c:c + 8]  # constant column offsets compile to faster loads
                a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
                for q in range(n):
                    i = 256 * q + raw[j, p0 + q]
                    a0 += T8[i, 0]
                    a1 += T8[i, 1]
                    a2 += T8[i, 2]
                    a3 += T8[i, 3]
                    a4 += T8[i, 4]
                    a5 += T8[i, 5]
                    a6 += T8[i, 6]
                    a7 += T8[i, 7]
                o = out[column, c:c + 8]
                o[0] += a0
                o[1] += a1
                o[2] += a2
                o[3] += a3
                o[4] += a4
                o[5] += a5
                o[6] += a6
                o[7] += a7


def _right_missing(ptr, people, start, stop, columns, flips, fills, Y4, total, out):
    """Turn :func:`right_block`'s sums into ``D_j Y`` for the file's variants ``start .. stop - 1``: with ``M_j``
    the rows of ``Y4`` (4 width, r) of variant ``j``'s missing calls (``people[ptr[j] .. ptr[j + 1] - 1]``) summed,
    a flipped variant's sum ``S`` becomes ``2 (total - M_j) - S`` (its non-missing calls count ``2 - g``), then
    ``fills[j - start] M_j`` is added (the missing calls' value). ``total`` (r,): all rows of ``Y4`` summed;
    ``out`` (d, r) at row ``columns[j - start]`` (nothing for -1)."""
    r = Y4.shape[1]
    missing = np.zeros(r)
    for j in range(start, stop):
        column = columns[j - start]
        if column < 0:
            continue
        for c in range(r):
            missing[c] = 0.0
        for m in range(ptr[j], ptr[j + 1]):
            person = people[m]
            for c in range(r):
                missing[c] += Y4[person, c]
        if flips[j - start]:
            for c in range(r):
                out[column, c] = 2.0 * (total[c] - missing[c]) - out[column, c]
        fill = fills[j - start]
        if fill != 0.0:
            for c in range(r):
                out[column, c] += fill * missing[c]


right_block = _Kernel(_right_block)
right_missing = _Kernel(_right_missing)




def _count_block(raw, people, code_counts, missing_flags, counts, missing):
    """One block's code counts and missing calls per person (:meth:`.rows.BedVariants._count_codes`).

    ``counts[j, c]`` (b, 4) int64, set: how many of the ``people`` carry code ``c`` at variant ``j`` of ``raw``
    (b, width) uint8, the full bytes from ``code_counts`` (256,) uint32 (a byte's four code counts as 8-bit lanes,
    summed 63 bytes at a time so that no lane overflows), a last byte's codes one by one (its padding left out).
    ``missing`` (4 width,) int64, added to: each person's missing calls over the block, from ``missing_flags``
    (256,) uint32 (a byte's four missing flags as lanes; a padding code is ``00``, never missing).
    """
    b, width = raw.shape[0], raw.shape[1]
    full = people // 4
    for j in range(b):
        c = np.zeros(4, dtype=np.int64)
        for p0 in range(0, full, 63):
            acc = np.uint32(0)
            for p in range(p0, min(p0 + 63, full)):
                acc += code_counts[raw[j, p]]
            c[0] += np.int64(acc & 0xFF)
            c[1] += np.int64((acc >> 8) & 0xFF)
            c[2] += np.int64((acc >> 16) & 0xFF)
            c[3] += np.int64(acc >> 24)
        for t in range(people - 4 * full):
            c[(raw[j, full] >> (2 * t)) & 3] += 1
        for code in range(4):
            counts[j, code] = c[code]
        for p in range(width):
            flags = missing_flags[raw[j, p]]
            if flags:
                missing[4 * p] += np.int64(flags & 1)
                missing[4 * p + 1] += np.int64((flags >> 8) & 1)
                missing[4 * p + 2] += np.int64((flags >> 16) & 1)
                missing[4 * p + 3] += np.int64(flags >> 24)


def _missing_people(raw, missing_flags, bytes_with, people):
    """Who has each missing call of ``raw`` (b, width) uint8, variant by variant, into ``people`` (as many as
    there are: the counts of code ``01`` of :func:`count_block`), in the order of
    :func:`.rows._missing_calls`: within a variant, the people of bit pair 0 of every byte first, then of pair 1,
    2 and 3, each in byte order. ``bytes_with`` (width,) int64 scratch."""
    b, width = raw.shape[0], raw.shape[1]
    m = 0
    for j in range(b):
        found = 0
        for p in range(width):
            if missing_flags[raw[j, p]]:
                bytes_with[found] = p
                found += 1
        for slot in range(4):
            shift = 8 * slot
            for i in range(found):
                p = bytes_with[i]
                if (missing_flags[raw[j, p]] >> shift) & 1:
                    people[m] = 4 * p + slot
                    m += 1


count_block = _Kernel(_count_block)
missing_people = _Kernel(_missing_people)
