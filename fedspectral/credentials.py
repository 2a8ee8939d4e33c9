"""Certificates for a TLS deployment and SuperNode authentication keys.

``python -m simulations.engines.credentials DIR [--nodes N] [--rotate]`` writes

* ``DIR/ca.crt``: a self-signed certificate authority (give it to every SuperNode
  and to ``flwr`` as ``root-certificates``);
* ``DIR/server.pem``, ``DIR/server.key``: the SuperLink's certificate, signed by
  the CA, valid for ``localhost`` and ``127.0.0.1`` (use ``--host`` to add the
  SuperLink's real name or address);
* ``DIR/node_<i>`` and ``DIR/node_<i>.pub``: one P-384 key pair per SuperNode in
  OpenSSH format, the private key for ``flower-supernode
  --auth-supernode-private-key`` and the public key for ``flwr supernode
  register``.

Everything is generated with the ``cryptography`` package (a dependency of
Flower); nothing is downloaded. The keys are for testing and for small
deployments: keep the CA key (``ca.key``) private, or delete it.

Keys never go into a repository: a ``DIR`` inside a git working copy that git does not ignore is refused
(:func:`committable_in`); Flower's app bundle (``flwr run .``) only takes ``.py``, ``.toml``, ``.md``, ``.yaml``,
``.json`` and ``LICENSE`` files, so it never ships a key or a certificate either.

It never replaces what is there: a ``DIR`` that already holds any of these files (a CA, a server key, a node
key of the requested range) is refused, naming them, and nothing is written; ``--rotate`` replaces them on
purpose (every SuperNode then needs its new key and the new ``ca.crt``).

Every file is written by :func:`fl_strategies.files.plain_files.write_file`: never through a link (a link at
any of these names is refused, ``--rotate`` or not, and nothing is written), into a temporary file renamed into
place. Every private key (``ca.key``, ``server.key``, ``node_<i>``) is created with mode 600 from its first
byte; a directory the module creates is mode 700.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import subprocess
import sys
from pathlib import Path

from fl_strategies.files.plain_files import UnsafeDestination, check_destination, write_file

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["write_tls_files", "write_node_keys", "written_names", "committable_in"]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_tls_files(directory: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), days: int = 30) -> None:
    """Write ``ca.crt``, ``ca.key``, ``server.pem`` and ``server.key`` into ``directory``.

    Parameters
    ----------
    directory : Path
    hosts : tuple of str
        Names and IP addresses the SuperLink's certificate is valid for.
    days : int
        Validity of both certificates.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(_name("fedspectral test CA")).issuer_name(_name("fedspectral test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA384()))
    server_key = ec.generate_private_key(ec.SECP384R1())
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .sign(ca_key, hashes.SHA384()))
    write_file(directory / "ca.key", _pem_key(ca_key), private=True)
    write_file(directory / "ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    write_file(directory / "server.key", _pem_key(server_key), private=True)
    write_file(directory / "server.pem", server.public_bytes(serialization.Encoding.PEM))


def write_node_keys(directory: Path, count: int, prefix: str = "node") -> list[Path]:
    """Write ``count`` P-384 key pairs ``<prefix>_<i>`` / ``<prefix>_<i>.pub`` (OpenSSH format).

    Returns
    -------
    list of Path
        The private-key files.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        key = ec.generate_private_key(ec.SECP384R1())
        private = directory / f"{prefix}_{i}"
        write_file(private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()), private=True)
        write_file(directory / f"{prefix}_{i}.pub",
                   key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
        paths.append(private)
    return paths


def written_names(nodes: int, prefix: str = "node") -> list[str]:
    """The files :func:`write_tls_files` and :func:`write_node_keys` (``nodes`` pairs) write, by name."""
    return ["ca.crt", "ca.key", "server.pem", "server.key"] + [
        f"{prefix}_{i}{suffix}" for i in range(nodes) for suffix in ("", ".pub")]


def committable_in(directory: Path) -> Path | None:
    """The git working copy in which a key written to ``directory`` could be committed, or ``None``.

    ``None`` when ``directory`` is in no working copy, when git ignores its files (``git check-ignore``), or
    when git cannot be run (nothing can then be committed from this machine).
    """
    directory = Path(directory).expanduser().resolve()
    top = next((parent for parent in (directory, *directory.parents) if (parent / ".git").exists()), None)
    if top is None:
        return None
    try:
        done = subprocess.run(["git", "-C", str(top), "check-ignore", "-q", "--no-index", str(directory / "ca.key")],
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return top if done.returncode == 1 else None


MAX_NODES = 10_000
"""Most SuperNode key pairs written in one call."""


EXAMPLES = """\
examples:
  {prog} "$FEDSPECTRAL_HOME/creds" --nodes 3 --host superlink.example.org
  {prog} "$FEDSPECTRAL_HOME/creds" --nodes 3 --rotate

  (writes ca.crt, ca.key, server.pem, server.key and node_<i> / node_<i>.pub; a DIR inside a git working
  copy that does not ignore it is refused, and so is one that already holds them, unless --rotate)

exit status: 0 written, 2 a bad argument or directory (one line, nothing written)
"""


def main(argv: list[str] | None = None, prog: str = "python -m simulations.engines.credentials") -> int:
    """Command-line entry point (2: a bad argument, one line).

    ``prog`` is the command's name in its usage and error lines (``fedspectral credentials`` from
    :mod:`fedspectral.cli`).
    """
    from fedspectral.run_config import ArgumentParser, listed

    parser = ArgumentParser(prog=prog, description="Write the certificates of a TLS deployment (a CA, the "
                            "SuperLink's certificate)\nand SuperNode authentication keys.",
                            epilog=EXAMPLES.format(prog=prog))
    parser.add_argument("directory", metavar="DIR", help="where the files go (created mode 700)")
    parser.add_argument("--nodes", type=int, default=0, help="number of SuperNode key pairs to write")
    parser.add_argument("--host", action="append", default=[], help="extra name or IP of the SuperLink")
    parser.add_argument("--rotate", action="store_true",
                        help="replace the CA and the keys already in DIR (without it, existing files are refused)")
    args = parser.parse_args(argv)

    def refuse(message: str) -> int:
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2

    out = Path(args.directory)
    if not 0 <= args.nodes <= MAX_NODES:
        return refuse(f"--nodes {args.nodes}: give a number of SuperNodes in [0, {MAX_NODES}]")
    if out.exists() and not out.is_dir():
        return refuse(f"directory {args.directory}: is a file, not a directory")
    for host in args.host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9*]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                                r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*", host):
                return refuse(f"--host {host!r}: not an IP address or a DNS name (letters, digits, '-' and '.')")
    repository = committable_in(out)
    if repository is not None:
        return refuse(f"directory {args.directory}: is in the git working copy {repository}, which does not "
                      "ignore it: the keys could be committed; choose a directory outside it (the README's "
                      "$FEDSPECTRAL_HOME/creds) or add it to .gitignore")
    try:
        for name in written_names(args.nodes):
            check_destination(out / name)
    except UnsafeDestination as ex:
        return refuse(f"directory {args.directory}: {ex}; nothing was written")
    existing = [name for name in written_names(args.nodes) if os.path.lexists(out / name)]
    if existing and not args.rotate:
        return refuse(f"directory {args.directory}: already holds {listed(existing)}; nothing was written (every "
                      "SuperNode provisioned from them would stop connecting): give --rotate to replace them, or "
                      "another directory")
    try:
        write_tls_files(out, hosts=("localhost", "127.0.0.1", *args.host))
        write_node_keys(out, args.nodes)
    except OSError as ex:
        return refuse(f"directory {args.directory}: cannot be written: {ex.strerror or ex}")
    replaced = f" (replaced {len(existing)} existing file(s): provision every SuperNode again)" if existing else ""
    print(f"wrote ca.crt, server.pem, server.key and {args.nodes} node key pair(s) to {out}{replaced}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
