"""What the ``fedspectral`` commands share: where the app is, the run config read and checked before Flower
starts, node files and output folders checked as the nodes and the server will use them.

``run``, ``deploy`` and ``credentials`` import these from here (never from ``simulations``, which they reach
only for the data generators a simulation asks for); :mod:`simulations.engines` re-exports them under their
older names.
"""

from __future__ import annotations

import re
from pathlib import Path

from fedspectral.app_bundle import PACKAGE_ROOT, AppBundleError, app_dir  # noqa: F401  (where the app is)
from fl_strategies.settings.command_line import ArgumentParser  # noqa: F401  (one line per bad argument)

APP_DIR = PACKAGE_ROOT
"""The directory holding the packages: the checkout (with ``pyproject.toml``), or ``site-packages`` when
installed. The commands ask :func:`app_dir` where the app is (:mod:`fedspectral.app_bundle`)."""


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

    return get_fused_config_from_dir(app_dir(), dict(overrides))



def listed(names: list[str], most: int = 6) -> str:
    """``names`` for a one-line message: the first ``most`` of them, then how many more."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


class ArgumentError(ValueError):
    """A command-line argument is unusable; the message names it (printed as one line, exit status 2)."""


TOKEN = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")
"""One ``key=value`` word of ``--run-config`` text: the pattern of Flower's ``parse_config_args``
(``flwr/common/config.py``), which keeps only the text it matches and silently drops the rest."""


def parse_run_config(text: str, option: str = "--run-config") -> dict:
    """``--run-config`` text (``'key=value ...'`` or a TOML file) as overrides; :class:`ArgumentError` if malformed.

    Every word is heard: Flower's parser (``parse_config_args``) keeps what its pattern matches and drops the rest
    without a word (``'num-clients=3 rank:2'`` runs with the default rank; ``'rank = 2'`` and a misspelt
    ``my-run.tml`` give no override at all). Here the text is split into words first, and a word that is not
    ``key=value`` (:data:`TOKEN`, followed by a space or the end), a key without a value, a key given twice, a
    value Flower cannot read, a ``.toml`` file that does not exist, is no regular file or does not parse are
    each refused in one line naming the word or the file. The words that pass are read by Flower as ``flwr run``
    will read them.

    Raises
    ------
    ArgumentError
        One line naming ``option``, the word or the file, and the reason.
    """
    from fl_strategies.protocol.flower_compat import parse_config_args

    if not text or not text.strip():
        return {}
    if text.endswith(".toml"):  # Flower reads the whole text as one file name then (a word with '=' too)
        return _run_config_file(text, option)
    overrides: dict = {}
    for word in _words(text, option):
        try:
            parsed = dict(parse_config_args([word]))
        except Exception as ex:  # noqa: BLE001 (Flower raises ValueError or click's ClickException)
            value = word.partition("=")[2]
            if value[:1] in "'\"" and (len(value) < 2 or value[-1] != value[0]):
                reason = "opens a quote it does not close (text with spaces goes in one pair of quotes)"
            else:
                reason = ("has a value Flower cannot read: " + (str(ex).strip() if isinstance(ex, ValueError) else
                          "give a number, true or false, or text in quotes (key=\"text\")"))
            raise ArgumentError(f"{option}: {word!r} {reason}") from None
        for key in parsed:
            if key in overrides:
                raise ArgumentError(f"{option}: {key} is given twice ({text!r}); give it once")
        overrides.update(parsed)
    try:  # the whole text, as `flwr run` will read it, must say the same
        whole = dict(parse_config_args([text]))
    except Exception:  # noqa: BLE001
        whole = None
    if whole != overrides:
        raise ArgumentError(f"{option} {text!r}: its words do not read as one run config (a key that is also a "
                            "table, e.g. a=1 a.b=2); give each key once")
    return overrides


def flower_run_config(text: str) -> str:
    """The ``--run-config`` text to hand Flower for the user's ``text``: the text itself, or, for a TOML file, the
    file's overrides as ``key=value`` words (:func:`config_words`). Flower refuses a TOML file beside other
    ``--run-config`` words ("TOML files cannot be passed alongside key-value pairs"), and ``fedspectral run`` and
    ``deploy`` add their own (absolute paths, ``results-dir``); the words read back to the file's values.

    Raises
    ------
    ArgumentError
        As :func:`parse_run_config`, or for a value no word can carry (:func:`config_words`).
    """
    if not text or not text.strip() or not text.endswith(".toml"):
        return text
    return config_words(parse_run_config(text))


def config_words(overrides: dict) -> str:
    """``overrides`` as ``--run-config`` words that Flower's parser reads back to the same values: a string by
    :func:`config_word`, a boolean as ``true`` / ``false``, an integer or a float by ``repr`` (TOML's forms, also
    ``inf`` and ``nan``).

    Raises
    ------
    ArgumentError
        For a value of another type (a TOML array or date), which a run config does not hold.
    """
    words = []
    for key, value in overrides.items():
        if isinstance(value, str):
            words.append(config_word(key, value))
        elif isinstance(value, bool):
            words.append(f"{key}={'true' if value else 'false'}")
        elif isinstance(value, (int, float)):
            words.append(f"{key}={value!r}")
        else:
            raise ArgumentError(f"--run-config: {key} = {value!r}: a run config holds strings, booleans and numbers "
                                "only")
    return " ".join(words)


def config_word(key: str, value: str) -> str:
    """``key="value"`` as a word Flower's parser reads whole (``--run-config``, ``--node-config``): a basic TOML
    string, or a literal one (``'value'``) when ``value`` holds a ``"`` or a backslash.

    Raises
    ------
    ArgumentError
        When ``value`` holds both kinds of quote (or a quote and a backslash): no word would carry it whole.
    """
    if '"' not in value and "\\" not in value:
        return f'{key}="{value}"'
    if "'" not in value:
        return f"{key}='{value}'"
    raise ArgumentError(f"{key} {value!r}: a path with both quote characters (or a quote and a backslash) cannot be "
                        "passed to Flower whole; rename it")


def _words(text: str, option: str):
    """The ``key=value`` words of ``text`` (:data:`TOKEN` each, separated by spaces), one at a time;
    :class:`ArgumentError` naming the first word that is not one."""
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return
        match = TOKEN.match(text, pos)
        end = match.end() if match else pos
        if match is None or (end < len(text) and not text[end].isspace()):
            stop = end
            while stop < len(text) and not text[stop].isspace():
                stop += 1
            word = text[pos:stop]
            if word.endswith("=") and word.count("=") == 1:
                raise ArgumentError(f"{option}: {word[:-1]} has no value (e.g. {word}10 or {word}\"text\")")
            if match is not None:
                reason = "has text after its value: text with spaces or quotes goes in one pair of quotes"
            elif word.startswith("="):
                reason = "has no key: no space may stand around '=' (key=value)"
            elif "." in word or "/" in word:
                reason = "is not key=value (a run-config file ends in .toml and is given alone)"
            else:
                reason = "is not key=value (e.g. rank=2, no space around '=')"
            raise ArgumentError(f"{option}: {word!r} {reason}; nothing of {text!r} is used")
        yield match.group(0)
        pos = end


def _run_config_file(name: str, option: str) -> dict:
    """The overrides of the TOML file ``name``, read as Flower reads it (flattened: ``[a] b = 1`` is ``a.b``)."""
    import tomllib

    from fl_strategies.files.plain_files import check_input
    from fl_strategies.protocol.flower_compat import parse_config_args

    path = Path(name).expanduser()
    if not path.exists() and (len(name.split()) > 1 or "=" in name):
        raise ArgumentError(f"{option} {name!r}: a .toml file is given alone (Flower reads text ending in .toml as "
                            "one file name, and there is no such file)")
    try:
        check_input(path, f"{option} {name!r}")
    except ValueError as ex:
        raise ArgumentError(str(ex)) from None
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
        return dict(parse_config_args([name]))
    except UnicodeDecodeError as ex:
        raise ArgumentError(f"{option} {name!r}: not a UTF-8 text file ({ex.reason} at byte {ex.start})") from None
    except tomllib.TOMLDecodeError as ex:
        raise ArgumentError(f"{option} {name!r}: not valid TOML: {ex}") from None
    except (OSError, ValueError) as ex:
        raise ArgumentError(f"{option} {name!r}: {getattr(ex, 'strerror', None) or ex}") from None


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

    try:  # an installed package's app directory (fedspectral.app_bundle): one line of its own if it cannot be made
        app_dir()
    except AppBundleError as ex:
        raise ArgumentError(str(ex)) from None
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
    from fl_strategies.files.harness import NODE_DATA, is_partition_folder

    if cfg["dataset"] == NODE_DATA:  # the nodes' own files: they are checked on the nodes
        return cfg
    if is_partition_folder(cfg["dataset"]):
        d = check_folder_files(cfg, option)
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


def check_folder_files(cfg: dict, option: str) -> int:
    """Read every per-client file of a folder data set (as its client will), check them against the run config,
    and return the run's width ``d``.

    The simulated clients read the same files again; here a bad file is one line before Flower starts, naming
    the partition and the file (empty, non-finite, unparsable, a FIFO or a device), and so are files that do not
    match ``num-clients`` (:func:`fl_strategies.files.harness.node_files`), files of different widths and ranks
    above the common width.

    Raises
    ------
    ArgumentError
        One line naming the option, the partition and the file, or the key.
    """
    from fl_strategies.files.harness import node_files

    where = f"the dataset folder {cfg['dataset']!r}"
    try:
        files = node_files(cfg["dataset"], cfg["num-clients"], where)
    except ValueError as ex:
        raise ArgumentError(f"{option}: {ex}") from None
    return check_node_files(cfg, files, option, "dataset folder file", f"dataset folder {cfg['dataset']!r}")


def check_node_files(cfg: dict, files: list[Path], option: str, label: str, where: str) -> int:
    """Read every node's file (as its client will) and check them together against the run config.

    Each file must pass :func:`fl_strategies.files.data_files.open_samples` (a ``.npy`` read without pickles or a
    numeric ``.csv``; 2-D, non-empty, finite), a ``.keep`` beside a genotype file must keep some of its people
    (:func:`fl_strategies.files.keep.site_keep`; they are the file's rows), all must have one width (PLINK ``.bed``
    or ``.pgen`` files, of one format and never mixed with others (:func:`fl_strategies.files.harness.node_files`):
    their variant lists must agree or align as the server will align them,
    :func:`fl_strategies.files.variants.align_variants`, and the run's width is the variants they share; no file
    may list a variant or a person twice), a secure power / krylov run over other data needs a public bound
    (``secagg-clip``, ``row-normalize`` or ``clip-norm``: genotypes carry their own), and that width and the rows
    over all files must fit the run config (:func:`fl_strategies.settings.config.check_against_data`).

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
        The run's width ``d``.

    Raises
    ------
    ArgumentError
        One line naming the option, the partition and the file, or the key.
    """
    from fl_strategies.settings.config import SECURE_BOUND_NEEDED, ConfigError, check_against_data, secure_power
    from fl_strategies.files.data_files import is_genotype_file, open_samples
    from fl_strategies.files.harness import widths_listed
    from fl_strategies.files.keep import site_keep

    widths: dict[int, list[str]] = {}
    rows = 0
    for pid, path in enumerate(files):
        try:
            X = open_samples(path, f"partition {pid}: {label}")  # as stored: memory-mapped, blockwise checks
        except ValueError as ex:
            raise ArgumentError(f"{option}: {ex}") from None
        widths.setdefault(X.shape[1], []).append(f"partition {pid} ({Path(path).name})")
        try:  # a .keep beside a genotype file: only its people enter the fit (fl_strategies.files.keep)
            kept = site_keep(path)
        except ValueError as ex:
            raise ArgumentError(f"{option}: partition {pid}: {label} {str(path)!r}: its .keep {ex}") from None
        rows += X.shape[0] if kept is None else kept[1].size
        del X
    if all(is_genotype_file(path) for path in files):  # one format: a mix is node_files' refusal
        d = _shared_variants(files, option, where, bool(cfg.get("drop-ambiguous", False)))
    elif secure_power(cfg) and not (cfg["secagg-clip"] > 0 or cfg["row-normalize"] or cfg["clip-norm"] > 0):
        raise ArgumentError(f"{option}: {SECURE_BOUND_NEEDED}")  # genotypes carry their own bound; these do not
    elif len(widths) > 1:
        raise ArgumentError(f"{option}: the files of {where} disagree on the number of columns: "
                            f"{widths_listed(widths)}")
    else:
        d = next(iter(widths))
    try:
        check_against_data(cfg, d, rows)
    except ConfigError as ex:
        raise ArgumentError(f"{option}: {ex}") from None
    return d


def _shared_variants(files: list[Path], option: str, where: str, drop_ambiguous: bool = False) -> int:
    """The number of variants the genotype files' variant lists (``.bim``, ``.pvar``) share, as the server will
    align them before round 1 (:meth:`fl_strategies.protocol.base.FederatedStrategy._agree_on_variants`: lists that
    agree are used as they are, less the strand-ambiguous variants with ``drop-ambiguous``; others by
    :func:`fl_strategies.files.variants.align_variants`). A file listing a variant ID twice, or a person (FID IID)
    twice, is refused naming them (:func:`fl_strategies.files.variants.check_unique_ids`)."""
    from fl_strategies.files.variants import (align_variants, check_unique_ids, is_ambiguous, read_bim, variant_digest,
                                              variant_list_path)

    lists, digests = {}, set()
    seen: dict[bytes, tuple[list, str]] = {}  # a variant file's bytes: its list and digest (sites' copies of one list)
    for pid, path in enumerate(files):
        try:
            data = variant_list_path(path).read_bytes()  # the file read_bim reads
            if data in seen:  # the same bytes as an earlier site's: the same list, checked already
                lists[pid], digest = seen[data]
                check_unique_ids(path, "genotype file", people_only=True)
            else:
                bim = read_bim(path)
                check_unique_ids(path, "genotype file", bim)  # the list just read, not read again
                lists[pid], digest = [(vid, a1, a2) for _, vid, _, a1, a2 in bim], variant_digest(bim)
                seen[data] = lists[pid], digest
        except (OSError, ValueError) as ex:
            raise ArgumentError(f"{option}: partition {pid}: {getattr(ex, 'strerror', None) or ex}") from None
        digests.add(digest)
    if len(digests) == 1 and not (drop_ambiguous and any(is_ambiguous(a1, a2) for _, a1, a2 in lists[0])):
        return len(lists[0])
    try:
        return len(align_variants(lists, drop_ambiguous)[0])
    except ValueError as ex:
        raise ArgumentError(f"{option}: the genotype files of {where}: {ex}") from None


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
