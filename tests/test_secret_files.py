"""Secret files (fl_strategies/files/secret_files.py): only a private regular file of the expected size is ever read."""

from __future__ import annotations

import errno
import os
import stat
import threading

import pytest

from fl_strategies.privacy.noise import SECRET_BYTES, read_or_create_secret
from fl_strategies.files.secret_files import PRIVATE_MODE, create_secret_file, read_secret_file

LABEL = "node config noise-secret"


def _secret(tmp_path, mode=0o600, data=b"k" * SECRET_BYTES):
    path = tmp_path / "secret"
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _refused(path, match):
    with pytest.raises(ValueError, match=match) as info:
        read_or_create_secret(path)
    message = str(info.value)
    assert message.startswith(f"{LABEL} {str(path)!r}: ") and "\n" not in message
    return message


def test_a_private_file_is_read_and_a_missing_one_is_created_private(tmp_path):
    path = _secret(tmp_path)
    assert read_or_create_secret(path) == b"k" * SECRET_BYTES
    new = tmp_path / "new"
    old = os.umask(0o277)  # a umask that would take the owner's write bit away
    try:
        drawn = read_or_create_secret(new)
    finally:
        os.umask(old)
    assert len(drawn) == SECRET_BYTES and stat.S_IMODE(new.lstat().st_mode) == 0o600
    assert read_or_create_secret(new) == drawn


@pytest.mark.parametrize("bit", [1 << i for i in range(12)], ids=lambda b: f"{b:04o}")
def test_every_mode_bit_besides_0600_is_refused(tmp_path, bit):
    """Each of the 9 permission bits and setuid, setgid and sticky, one at a time: set where 0600 has it clear,
    cleared where 0600 has it set."""
    mode = PRIVATE_MODE ^ bit
    path = _secret(tmp_path, mode)
    assert stat.S_IMODE(path.lstat().st_mode) == mode
    message = _refused(path, f"mode {mode:04o}.*must be exactly 0600")
    if bit & 0o044:
        assert "others may read it" in message


def test_a_link_a_fifo_a_device_and_a_directory_are_refused_before_anything_is_read(tmp_path):
    real = _secret(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    _refused(link, "is a symbolic link, not a regular file")
    device = tmp_path / "zero"
    device.symlink_to("/dev/zero")  # a link to a device that never ends: nothing is read from it
    _refused(device, "is a symbolic link")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    outcome = []  # opening a FIFO for reading would wait for a writer: run it aside, with a time limit

    def read_fifo():
        try:
            read_or_create_secret(fifo)
        except ValueError as ex:
            outcome.append(str(ex))

    worker = threading.Thread(target=read_fifo, daemon=True)
    worker.start()
    worker.join(10)
    assert outcome and "is a FIFO (named pipe), not a regular file" in outcome[0] and "\n" not in outcome[0]
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o700)
    _refused(folder, "is a directory")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(tmp_path):
    path = _secret(tmp_path)
    os.chown(path, 12345, -1)
    _refused(path, "is owned by uid 12345, not by the user reading it")


@pytest.mark.parametrize("size", [0, SECRET_BYTES - 1, SECRET_BYTES + 1, 1 << 20])
def test_a_file_of_another_size_is_refused(tmp_path, size):
    _refused(_secret(tmp_path, data=b"x" * size), f"holds {size} bytes, not a 32-byte secret")


def test_a_file_that_grows_after_its_check_is_read_no_further_than_one_byte_past_the_expected_size(tmp_path,
                                                                                                    monkeypatch):
    """The read is bounded whatever the file turns into after ``lstat``: here it claims 32 bytes but holds 1 MB."""
    import fl_strategies.files.secret_files as secret_files

    path = _secret(tmp_path, data=b"x" * (1 << 20))
    real = os.lstat(path)
    fake = os.stat_result((real.st_mode, real.st_ino, real.st_dev, real.st_nlink, real.st_uid, real.st_gid,
                           SECRET_BYTES, real.st_atime, real.st_mtime, real.st_ctime))
    monkeypatch.setattr(secret_files.os, "lstat", lambda p: fake)
    monkeypatch.setattr(secret_files.os, "fstat", lambda fd: fake)
    asked = []
    read = os.read
    monkeypatch.setattr(secret_files.os, "read", lambda fd, n: (asked.append(n), read(fd, n))[1])
    with pytest.raises(ValueError, match="holds 33 bytes, not 32"):
        read_secret_file(path, SECRET_BYTES, LABEL)
    assert sum(asked) <= SECRET_BYTES + 1


def test_a_file_replaced_between_its_check_and_its_opening_is_refused(tmp_path, monkeypatch):
    import fl_strategies.files.secret_files as secret_files

    path = _secret(tmp_path)
    (tmp_path / "other").mkdir()
    other = _secret(tmp_path / "other")
    monkeypatch.setattr(secret_files.os, "lstat", lambda p: os.stat(other))
    with pytest.raises(ValueError, match="was replaced while it was being read"):
        read_secret_file(path, SECRET_BYTES, LABEL)


def test_a_dangling_link_is_refused_and_nothing_is_created_through_it(tmp_path):
    target = tmp_path / "elsewhere"
    link = tmp_path / "secret"
    link.symlink_to(target)
    _refused(link, "is a symbolic link")
    assert not target.exists()


_VERBS = {0o040: "read", 0o004: "read", 0o020: "write", 0o002: "write", 0o010: "execute", 0o001: "execute"}


@pytest.mark.parametrize("bit", sorted(_VERBS), ids=lambda b: f"{b:04o}")
def test_the_refusal_names_only_what_the_extra_bit_lets_others_do(tmp_path, bit):
    """A mode of 0600 plus one group or other bit: the message names that bit's access and no other."""
    path = _secret(tmp_path, PRIVATE_MODE | bit)
    message = _refused(path, "must be exactly 0600")
    assert f"others may {_VERBS[bit]} it (mode {PRIVATE_MODE | bit:04o})" in message
    assert [v for v in ("read", "write", "execute") if f"may {v}" in message] == [_VERBS[bit]]


def test_a_missing_file_is_named_with_the_systems_reason_only(tmp_path):
    """The reason is the OS's one-line text (``strerror``), not the exception's repr with the path again."""
    path = tmp_path / "missing"
    with pytest.raises(ValueError) as info:
        read_secret_file(path, SECRET_BYTES, LABEL)
    assert str(info.value) == f"{LABEL} {str(path)!r}: cannot be read: {os.strerror(errno.ENOENT)}"


@pytest.mark.parametrize("where", ["open", "read", "create"])
def test_an_os_error_is_named_with_the_systems_reason_only(tmp_path, monkeypatch, where):
    """Opening, reading and creating: the one-line reason is the OS's ``strerror``."""
    import fl_strategies.files.secret_files as secret_files

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    path = _secret(tmp_path) if where != "create" else tmp_path / "new"
    monkeypatch.setattr(secret_files.os, "read" if where == "read" else "open", fail)
    with pytest.raises(ValueError) as info:
        if where == "create":
            create_secret_file(path, b"k" * SECRET_BYTES, LABEL)
        else:
            read_secret_file(path, SECRET_BYTES, LABEL)
    verb = "cannot create it" if where == "create" else "cannot be read"
    assert str(info.value) == f"{LABEL} {str(path)!r}: {verb}: {os.strerror(errno.EIO)}"


def _checked_as(monkeypatch, st):
    """Make ``read_secret_file``'s ``lstat`` report ``st``: the path changes between the check and the open."""
    import fl_strategies.files.secret_files as secret_files

    monkeypatch.setattr(secret_files.os, "lstat", lambda p: st)


def test_a_link_put_in_place_after_the_check_is_not_followed(tmp_path, monkeypatch):
    """The checked file itself, reached through a link swapped in after ``lstat``: the open refuses the link."""
    real = _secret(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    _checked_as(monkeypatch, os.lstat(real))
    with pytest.raises(ValueError, match="cannot be read"):
        read_secret_file(link, SECRET_BYTES, LABEL)


def test_a_fifo_put_in_place_after_the_check_does_not_block_the_read(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    _checked_as(monkeypatch, os.lstat(_secret(tmp_path)))
    outcome = []  # without a non-blocking open this would wait for a writer: run it aside, with a time limit

    def read_fifo():
        try:
            read_secret_file(fifo, SECRET_BYTES, LABEL)
        except ValueError as ex:
            outcome.append(str(ex))

    worker = threading.Thread(target=read_fifo, daemon=True)
    worker.start()
    worker.join(5)
    assert outcome and "\n" not in outcome[0]


def test_a_mode_changed_after_the_check_is_refused_on_the_open_file(tmp_path, monkeypatch):
    """Same file (same inode), made readable by others between ``lstat`` and the open: the descriptor's check."""
    path = _secret(tmp_path)
    private = os.lstat(path)
    os.chmod(path, 0o644)
    _checked_as(monkeypatch, private)
    with pytest.raises(ValueError, match="others may read it"):
        read_secret_file(path, SECRET_BYTES, LABEL)


def test_a_file_that_grew_is_refused_even_when_the_system_reads_a_byte_at_a_time(tmp_path, monkeypatch):
    """Short reads are allowed to a kernel: the bounded read still asks for the byte past the expected size."""
    import fl_strategies.files.secret_files as secret_files

    path = _secret(tmp_path, data=b"x" * (SECRET_BYTES + 7))
    real = os.lstat(path)
    fake = os.stat_result((real.st_mode, real.st_ino, real.st_dev, real.st_nlink, real.st_uid, real.st_gid,
                           SECRET_BYTES, real.st_atime, real.st_mtime, real.st_ctime))
    monkeypatch.setattr(secret_files.os, "lstat", lambda p: fake)
    monkeypatch.setattr(secret_files.os, "fstat", lambda fd: fake)
    read = os.read
    monkeypatch.setattr(secret_files.os, "read", lambda fd, n: read(fd, min(n, 1)))
    with pytest.raises(ValueError, match=f"holds {SECRET_BYTES + 1} bytes, not {SECRET_BYTES}"):
        read_secret_file(path, SECRET_BYTES, LABEL)


def test_creation_says_whether_it_created_and_never_touches_an_existing_file(tmp_path):
    path = tmp_path / "new"
    assert create_secret_file(path, b"a" * SECRET_BYTES, LABEL) is True
    assert create_secret_file(path, b"b" * SECRET_BYTES, LABEL) is False
    assert path.read_bytes() == b"a" * SECRET_BYTES
