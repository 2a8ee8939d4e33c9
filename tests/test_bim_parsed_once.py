"""A ``.bim`` is parsed once per process for each content (``fl_strategies/files/variants.py``: ``read_bim``,
``file_variants``): the same file asked for again, or another site's copy of the list, is not parsed again, and a
changed file is read as it is now, even at the same size and modification time."""

from __future__ import annotations

import hashlib
import os

import pytest

from fl_strategies.files import variants
from fl_strategies.files.variants import file_variants, read_bim, variant_digest


def write_bim(path, rows):
    path.with_suffix(".bim").write_text("".join(f"{c}\t{v}\t0\t{p}\t{a1}\t{a2}\n" for c, v, p, a1, a2 in rows))
    return path


ROWS = [("1", "rs1", "100", "A", "G"), ("1", "rs2", "200", "C", "T"), ("2", "rs3", "50", "G", "T")]


def test_the_same_text_is_parsed_once_and_a_changed_file_again(tmp_path, monkeypatch):
    parsed = []
    parse = variants._parse_bim
    monkeypatch.setattr(variants, "_parse_bim", lambda data, listing: parsed.append(listing) or parse(data, listing))
    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    one, two = write_bim(tmp_path / "a.bed", ROWS), write_bim(tmp_path / "b.bed", ROWS)
    assert read_bim(one) == ROWS and read_bim(one) == ROWS and read_bim(two) == ROWS
    assert file_variants(two) == [(v, a1, a2) for _, v, _, a1, a2 in ROWS]
    assert len(parsed) == 1  # one text, four reads
    got = read_bim(one)
    got.clear()  # a caller's list is its own
    assert read_bim(one) == ROWS
    # the same size and modification time, other alleles: read as it is now
    stat = one.with_suffix(".bim").stat()
    changed = [ROWS[0], ("1", "rs2", "200", "C", "A"), ROWS[2]]
    write_bim(one, changed)
    os.utime(one.with_suffix(".bim"), ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert one.with_suffix(".bim").stat().st_size == stat.st_size
    assert read_bim(one) == changed and file_variants(one)[1] == ("rs2", "C", "A")
    assert read_bim(two) == ROWS and len(parsed) == 2


def test_a_bad_line_is_refused_every_time_and_the_digest_is_that_of_the_lines(tmp_path):
    bad = tmp_path / "bad.bed"
    bad.with_suffix(".bim").write_text("1 rs1 0 100 A G\n\n1 rs2 0 200 C\n")
    for _ in range(2):
        with pytest.raises(ValueError, match=r"bad\.bim: line 2 has 5 fields, not 6"):
            read_bim(bad)
    expected = hashlib.sha256()
    for row in ROWS:
        expected.update(("\t".join(row) + "\n").encode("utf-8"))
    assert variant_digest(ROWS) == expected.hexdigest()
    assert variant_digest([]) == hashlib.sha256().hexdigest()


@pytest.mark.parametrize("ids,named", [
    (["rs1", "rs2", "rs3"], ""),
    (["rs1", ".", ".", "", "", "rs2"], ""),  # IDs that name no variant are not counted
    (["rs1", "rs2", "rs1", ".", "."], "rs1 (2 times)"),
    ([("f", "i"), ("f", "j"), ("f", "i")], "f i (2 times)"),
    ([f"rs{j % 7}" for j in range(100)], "rs0 (15 times), rs1 (15 times), rs2 (14 times), rs3 (14 times), rs4 (14 "
                                         "times) and 2 more"),
])
def test_repeated_ids_are_named_in_first_seen_order(ids, named):
    assert variants.duplicate_ids(iter(ids)) == named


def old_parse(path):
    """The one-line-at-a-time reading of a ``.bim`` (the earlier read_bim), the reference."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if fields:
                if len(fields) != 6:
                    raise ValueError(f"{path}: line {len(rows) + 1} has {len(fields)} fields, not 6")
                rows.append((fields[0], fields[1], fields[3], fields[4], fields[5]))
    return rows


@pytest.mark.parametrize("text", [
    "1 rs1 0 100 A G\n2\trs2\t0.5\t200\tC\tT\n",
    "1 rs1 0 100 A G\r\n\r\n  \t \r\n2 rs2 0 200 C T",  # CRLF, blank and white lines, no last newline
    "1 rs1 0 100 A G\r2 rs2 0 200 C T\r",  # old Mac line ends
    "1 rs1 0 100 A G\f\n1 rs\u00e91 0 7 A\x0bG\n",  # form feed and vertical tab: white space inside a line
    "",
    "\n\n1 rs1 0 100 A G\n1 rs2 0 200 C\n1 rs3 0 300 A G\n",  # line 2 of the non-blank ones has 5 fields
    "1 rs1 0 100 A G extra\n",
    "1 rs1 0 100 A G\r\n1 rs2\r0 200 C T\n",  # a lone \\r ends a line inside what \\n would keep whole
])
def test_a_bim_is_read_as_the_line_at_a_time_reading_read_it(tmp_path, text, monkeypatch):
    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    path = tmp_path / "g.bed"
    path.with_suffix(".bim").write_bytes(text.encode("utf-8"))
    try:
        expected = old_parse(path.with_suffix(".bim"))
    except ValueError as ex:
        with pytest.raises(ValueError) as refused:
            read_bim(path)
        assert str(refused.value) == str(ex)
    else:
        assert read_bim(path) == expected


def test_a_node_reads_its_variant_list_again_when_only_the_list_changed(tmp_path):
    """A node's caches (client_app/data.py) are keyed by its ``.bed`` and its ``.bim``: a list changed beside an
    unchanged ``.bed`` (a long-lived SuperNode between runs) is read as it is now, and so are the columns."""
    bed_reader = pytest.importorskip("bed_reader")
    import numpy as np

    from client_app.data import NodeData

    G = np.random.default_rng(4).integers(0, 3, (12, 3)).astype(np.float32)
    bed_reader.to_bed(tmp_path / "g.bed", G)
    cfg = {"num-clients": 1, "row-normalize": False, "dataset": "nodes", "dimension": 0}
    node = {"partition-id": 0, "data-path": str(tmp_path / "g.bed")}
    write_bim(tmp_path / "g.bed", ROWS)
    assert NodeData(cfg, node).bim == ROWS
    renamed = [ROWS[0], ("1", "rs22", "200", "C", "T"), ROWS[2]]
    write_bim(tmp_path / "g.bed", renamed)
    assert NodeData(cfg, node).bim == renamed


def test_the_parsed_lists_are_let_go_of_when_asked(tmp_path, monkeypatch):
    """``fedspectral run`` keeps no parsed list while Flower runs (fedspectral/run.py calls ``forget_parsed``)."""
    from pathlib import Path

    import fedspectral.run as run

    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    read_bim(write_bim(tmp_path / "a.bed", ROWS))
    assert len(variants._PARSED) == 1
    variants.forget_parsed()
    assert len(variants._PARSED) == 0
    assert "forget_parsed()" in Path(run.__file__).read_text()


def test_the_digest_and_the_repeated_ids_of_a_list_are_found_once_per_content(tmp_path, monkeypatch):
    """The sites' copies of one ``.bim`` (four sites in one process) have their digest and their repeated IDs
    found once; a changed list (same size and time) again; a repeated ID is still refused at every copy."""
    from fl_strategies.files.variants import check_unique_ids, list_digest

    digests, counted = [], []
    digest, repeats = variants.variant_digest, variants.duplicate_ids
    monkeypatch.setattr(variants, "variant_digest", lambda bim: digests.append(1) or digest(bim))
    monkeypatch.setattr(variants, "duplicate_ids", lambda ids, *a: counted.append(1) or repeats(ids, *a))
    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    sites = [write_bim(tmp_path / f"s{i}.bed", ROWS) for i in range(4)]
    for site in sites:
        site.with_suffix(".fam").write_text(f"f{site.stem} p1 0 0 0 -9\nf{site.stem} p2 0 0 0 -9\n")
    assert {list_digest(site) for site in sites} == {digest(ROWS)} and len(digests) == 1
    for site in sites:
        check_unique_ids(site, "genotype file")
    assert len(counted) == 1 + 4  # the variant IDs once, each site's people
    stat = sites[0].with_suffix(".bim").stat()
    twice = [ROWS[0], ("1", "rs1", "200", "C", "T"), ROWS[2]]
    write_bim(sites[0], twice)
    os.utime(sites[0].with_suffix(".bim"), ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert list_digest(sites[0]) == digest(twice) and list_digest(sites[1]) == digest(ROWS) and len(digests) == 2
    for _ in range(2):
        with pytest.raises(ValueError, match=r"s0\.bed' lists variant IDs more than once: rs1 \(2 times\)"):
            check_unique_ids(sites[0], "genotype file")


def test_a_settled_list_is_not_read_again_and_a_changed_or_fresh_one_is(tmp_path, monkeypatch):
    """A ``.bim`` unchanged for ``SETTLED_NS`` before it was read is known by its stat (path, inode, size, times)
    afterwards; one written again (a later change time) is read again, and so is a file written just now
    (its times could stay within a clock tick of a rewrite) at every call."""
    reads = []
    real_open = open

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(variants, "open", counted, raising=False)
    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    monkeypatch.setattr(variants, "_STAMPS", {})
    fresh = write_bim(tmp_path / "fresh.bed", ROWS)
    for _ in range(3):
        assert read_bim(fresh) == ROWS
    assert len(reads) == 3  # just written: read every time (the default SETTLED_NS)
    monkeypatch.setattr(variants, "SETTLED_NS", 0)  # as if written long ago
    settled = write_bim(tmp_path / "settled.bed", ROWS)
    reads.clear()
    assert read_bim(settled) == ROWS and read_bim(settled) == ROWS and file_variants(settled)[0] == ("rs1", "A", "G")
    assert len(reads) == 1
    changed = [ROWS[0], ("1", "rs2", "200", "C", "A"), ROWS[2], ("3", "rs4", "9", "A", "C")]
    write_bim(settled, changed)
    assert read_bim(settled) == changed and len(reads) == 2
    variants.forget_parsed()  # the stamps go with the lists
    assert not variants._STAMPS
    assert read_bim(settled) == changed and len(reads) == 3 and len(variants._STAMPS) == 1


def test_sites_asking_at_once_have_the_digest_found_once(tmp_path, monkeypatch):
    """Discovery asks the four in-process sites together (a thread each): one finds the digest and the repeated
    IDs, the others wait for it."""
    import threading
    import time

    from fl_strategies.files.variants import check_unique_ids, list_digest

    digests, counted = [], []
    digest, repeats = variants.variant_digest, variants.duplicate_ids

    def slow_digest(bim):
        digests.append(1)
        time.sleep(0.05)  # long enough for the other threads to arrive meanwhile
        return digest(bim)

    def slow_repeats(ids, *args):
        counted.append(1)
        time.sleep(0.05)
        return repeats(ids, *args)

    monkeypatch.setattr(variants, "variant_digest", slow_digest)
    monkeypatch.setattr(variants, "duplicate_ids", slow_repeats)
    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    sites = [write_bim(tmp_path / f"s{i}.bed", ROWS) for i in range(4)]
    for site in sites:
        site.with_suffix(".fam").write_text("f p1 0 0 0 -9\n")
    got = []
    threads = [threading.Thread(target=lambda s=site: got.append(list_digest(s)) or check_unique_ids(s, "file"))
               for site in sites]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [digest(ROWS)] * 4 and len(digests) == 1
    assert len(counted) == 1 + 4  # the variant IDs once, each site's people


def test_two_lists_have_their_digests_found_side_by_side(tmp_path, monkeypatch):
    """Each parsed list has its own lock (``_derived``): while one list's digest is being found, another list's
    digest is found meanwhile, not after it (one lock for all lists made the second wait)."""
    import threading

    from fl_strategies.files.variants import list_digest

    digest = variants.variant_digest
    other = [ROWS[0], ("1", "rs2", "200", "C", "A"), ROWS[2]]
    first_started, second_done, seen = threading.Event(), threading.Event(), []

    def waiting_digest(bim):
        if bim == ROWS:  # the first list waits, inside its computation, for the other list's to finish
            first_started.set()
            seen.append(second_done.wait(timeout=10))
        else:
            second_done.set()
        return digest(bim)

    monkeypatch.setattr(variants, "variant_digest", waiting_digest)
    monkeypatch.setattr(variants, "_PARSED", type(variants._PARSED)())
    one, two = write_bim(tmp_path / "one.bed", ROWS), write_bim(tmp_path / "two.bed", other)
    got = {}
    first = threading.Thread(target=lambda: got.update(one=list_digest(one)))
    first.start()
    assert first_started.wait(timeout=10)
    got["two"] = list_digest(two)
    first.join()
    assert seen == [True] and got == {"one": digest(ROWS), "two": digest(other)}
