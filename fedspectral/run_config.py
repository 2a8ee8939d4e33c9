"""What the ``fedspectral`` commands share: where the app is, the run config read and checked before Flower
starts, node files and output folders checked as the nodes and the server will use them.

``run``, ``deploy`` and ``credentials`` import these from here (never from ``simulations``, which they reach
only for the data generators a simulation asks for); :mod:`simulations.engines` re-exports them under their
older names.
"""

from __future__ import annotations

from pathlib import Path

from fl_strategies.settings.command_line import ArgumentParser  # noqa: F401  (one line per bad argument)

APP_DIR = Path(__file__).resolve().parents[1]
"""The project directory (holds ``pyproject.toml`` with the default run config)."""


def fused_run_config(overrides: dict) -> dict:
    """The default run config of ``pyproject.toml`` with ``overrides`` applied.

    Raises
    ------
    fl_strategies.settings.config.ConfigError
        On an unknown key, naming the closest valid one (:func:`fl_strategies.settings.config.check_known_keys`).
    """
    from fl_strategies.settings.config import check_known_keys
    from fl_strategies.protocol.flower_compat import get_fused_config_from_dir

    check_known_keys(overrides)

    return get_fused_config_from_dir(APP_DIR, dict(overrides))



def listed(names: list[str], most: int = 6) -> str:
    """``names`` for a one-line message: the first ``most`` of them, then how many more."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


class ArgumentError(ValueError):
    """A command-line argument is unusable; the message names it (printed as one line, exit status 2)."""


def parse_run_config(text: str, option: str = "--run-config") -> dict:
    """``--run-config`` text (``'key=value ...'`` or a TOML file) as overrides; :class:`ArgumentError` if malformed."""
    from fl_strategies.protocol.flower_compat import parse_config_args

    if not text:
        return {}
    if not text.strip().endswith(".toml"):  # Flower silently drops a key with no value ('num-clients=')
        import re

        empty = re.search(r"(?:^|\s)([A-Za-z0-9_.-]+)=(?=\s|$)", text)
        if empty:
            raise ArgumentError(f"{option} {text!r}: {empty.group(1)} has no value (e.g. {empty.group(1)}=10 or "
                                f'{empty.group(1)}="text")')
    try:
        return dict(parse_config_args([text]))
    except Exception as ex:  # noqa: BLE001 (Flower raises ValueError, TOML errors or SystemExit-free typer errors)
        raise ArgumentError(f"{option} {text!r}: {str(ex).strip() or type(ex).__name__}") from None


def checked_run_config(overrides: dict, option: str = "--run-config") -> dict:
    """The validated run config of ``overrides`` on ``pyproject.toml``'s defaults, checked against its data.

    Everything that a run would refuse before round 1 and that needs no node is refused here, before any
    Flower process starts: unknown keys, wrong types and ranges
    (:func:`fl_strategies.settings.config.validate_run_config`), a ``results-dir`` holding an earlier run's results
    (:func:`fl_strategies.settings.config.check_results_dir`), a ``checkpoint-dir`` holding an earlier run's checkpoint
(:func:`fl_strategies.protocol.checkpoint.check_checkpoint_dir`), keys the strategy does not read
    (:func:`fl_strategies.settings.config.check_unread_keys`: printed as one warning line on stderr, refused under
    ``strict = true``), and ranks or ``num-clients`` that the data set cannot hold (without generating a lazy data set).

    Raises
    ------
    ArgumentError
        One line naming the option and the key.
    """
    import sys

    from fl_strategies.settings.config import (ConfigError, check_against_data, check_results_dir, check_unread_keys,
                                      default_run_config, validate_run_config)

    from fl_strategies.files.warm_start import check_width, load_start
    from fl_strategies.protocol.checkpoint import check_checkpoint_dir

    try:
        given = fused_run_config(overrides)
        cfg = validate_run_config(given)
        unread = check_unread_keys(given, default_run_config())
        if unread:
            print(f"warning: {unread}", file=sys.stderr)
        check_results_dir(cfg)
        check_checkpoint_dir(cfg)  # an earlier run's checkpoint is never replaced without resume or overwrite
        start = load_start(cfg)  # init-from: the earlier model, read as the server will
    except (ConfigError, ValueError) as ex:
        raise ArgumentError(f"{option}: {ex}") from None
    from fl_strategies.files.harness import NODE_DATA, folder_partitions

    if cfg["dataset"] == NODE_DATA:  # the nodes' own files: they are checked on the nodes
        return cfg
    if folder_partitions(cfg["dataset"]) is not None:
        d = _check_folder(cfg, option)
        if start is not None:
            try:
                check_width(start, d)
            except ConfigError as ex:
                raise ArgumentError(f"{option}: {ex}") from None
        return cfg
    from simulations.data.federated_data import data_shape
    from simulations.data.interaction_data import interaction_rows, is_interaction_folder

    try:
        if is_interaction_folder(cfg["dataset"]):
            rows = interaction_rows(cfg)
            n, d = rows.shape
        else:
            n, d = data_shape(cfg)
        check_against_data(cfg, d, n)
        if start is not None:
            check_width(start, d)
    except (ValueError, MemoryError) as ex:
        raise ArgumentError(f"{option}: {str(ex) or type(ex).__name__}") from None
    return cfg


def _check_folder(cfg: dict, option: str) -> int:
    """Read every per-client file of a folder data set (as its client will), check them against the run config,
    and return their common width ``d``.

    The simulated clients read the same files again; here a bad file is one line before Flower starts, naming
    the partition and the file (empty, non-finite, unparsable), and so are files of different widths and ranks
    above the common width.

    Raises
    ------
    ArgumentError
        One line naming the option, the partition and the file, or the key.
    """
    from fl_strategies.files.harness import partition_file

    try:
        files = [partition_file(cfg["dataset"], pid) for pid in range(cfg["num-clients"])]
    except ValueError as ex:
        raise ArgumentError(f"{option}: {ex}") from None
    return check_node_files(cfg, files, option, "dataset folder file", f"dataset folder {cfg['dataset']!r}")


def check_node_files(cfg: dict, files: list[Path], option: str, label: str, where: str) -> int:
    """Read every node's file (as its client will) and check them together against the run config.

    Each file must pass :func:`fl_strategies.files.data_files.open_samples` (a ``.npy`` read without pickles or a
    numeric ``.csv``; 2-D, non-empty, finite), all must have one width, and that width and the rows over all
    files must fit the run config (:func:`fl_strategies.settings.config.check_against_data`).

    Parameters
    ----------
    cfg : dict
        The validated run config.
    files : list of Path
        File ``i`` is partition ``i``'s.
    option : str
        The command-line option the messages start with (``--run-config``, ``--data-dir DIR``).
    label, where : str
        How a message names one file (``"dataset folder file"``) and all of them (``"dataset folder 'DIR'"``).

    Returns
    -------
    int
        The files' common width ``d``.

    Raises
    ------
    ArgumentError
        One line naming the option, the partition and the file, or the key.
    """
    from fl_strategies.settings.config import ConfigError, check_against_data
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.harness import widths_listed

    widths: dict[int, list[str]] = {}
    rows = 0
    for pid, path in enumerate(files):
        try:
            X = open_samples(path, f"partition {pid}: {label}")  # as stored: memory-mapped, blockwise checks
        except ValueError as ex:
            raise ArgumentError(f"{option}: {ex}") from None
        widths.setdefault(X.shape[1], []).append(f"partition {pid} ({Path(path).name})")
        rows += X.shape[0]
        del X
    if len(widths) > 1:
        raise ArgumentError(f"{option}: the files of {where} disagree on the number of columns: "
                            f"{widths_listed(widths)}")
    try:
        check_against_data(cfg, next(iter(widths)), rows)
    except ConfigError as ex:
        raise ArgumentError(f"{option}: {ex}") from None
    return next(iter(widths))


OUTPUT_KEYS = ("results-dir", "checkpoint-dir")
"""Run-config keys naming a directory the server writes into."""


def check_output_dirs(cfg: dict, option: str = "--run-config", keys: tuple[str, ...] = OUTPUT_KEYS) -> None:
    """Create (if needed) and test-write every output directory of ``cfg`` before any Flower process starts.

    Raises
    ------
    ArgumentError
        One line naming the option (when not ``""``), the key and the reason.
    """
    from fl_strategies.settings.config import ConfigError, writable_directory

    for key in keys:
        if cfg.get(key):
            try:
                writable_directory(cfg[key], key)
            except ConfigError as ex:
                raise ArgumentError(f"{option}: {ex}" if option else str(ex)) from None
