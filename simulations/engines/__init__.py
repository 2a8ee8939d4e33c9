"""The engines that run the same ServerApp and ClientApp: in-process (``local``) and Flower's Ray engine.

The helpers the ``fedspectral`` commands share (the app's directory, the run config read and checked, node
files, output folders) live in :mod:`fedspectral.run_config`; they are re-exported here under their older names.
"""

from __future__ import annotations

from pathlib import Path

from fedspectral.run_config import (APP_DIR, ArgumentError, ArgumentParser, app_dir,  # noqa: F401
                                    check_node_files, check_output_dirs, checked_run_config, fused_run_config,
                                    listed, parse_run_config)


def engine_directory(run_config: dict, partition_of: dict[int, int]):
    """The :class:`fl_strategies.protocol.node_directory.NodeDirectory` of an engine's nodes (``discovery = "engine"``).

    Row counts come from the data generator (:func:`simulations.data.federated_data.partition_sizes`: arithmetic for
    a lazy data set); nothing is asked of the nodes. In a run that checkpoints, a data set read from a file gives
    each partition the fingerprint of that file, as a node would report it.
    """
    from fl_strategies.settings.config import validate_run_config
    from fl_strategies.files.data_files import file_fingerprint, is_data_file
    from fl_strategies.protocol.node_directory import NodeDirectory

    from simulations.data.federated_data import partition_sizes

    cfg = validate_run_config(run_config)
    sizes = dict(enumerate(partition_sizes(cfg).tolist()))
    fingerprints = {}
    if cfg["checkpoint-dir"] and is_data_file(cfg["dataset"]):
        fingerprints = dict.fromkeys(sizes, file_fingerprint(cfg["dataset"]))
    return NodeDirectory(partition_of=dict(partition_of), sizes=sizes, fingerprints=fingerprints)


def read_results(directory: str | Path, columns: tuple[str, ...] = (), name: str = "results.csv"):
    """``directory/name`` as a data frame with ``columns``; :class:`ArgumentError` naming the file otherwise."""
    import pandas as pd

    path = Path(directory) / name
    if not path.is_file():
        raise ArgumentError(f"{path}: no such file (give the --out directory of a finished simulations.compare run)")
    try:
        df = pd.read_csv(path)
    except (ValueError, OSError) as ex:
        raise ArgumentError(f"{path}: cannot be read: {ex}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing or df.empty:
        raise ArgumentError(f"{path}: " + ("has no rows" if df.empty else f"has no column {', '.join(missing)}"
                                            + " (the results of another kind of comparison?)"))
    return df

