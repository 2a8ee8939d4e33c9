"""Apply a run's PCA model to rows on this node: ``python -m client_app.transform --model pca.npz --data rows.npy
--out scores.npy``.

The rows never leave the node; the scores are ``((X - mean) / scale) @ components.T`` (shape ``(m, k)``), as
scikit-learn's ``PCA.transform`` (after ``StandardScaler.transform`` when the run had ``scale = true``; ``scale`` is
all ones otherwise), after the same row normalisation as the run (:func:`fl_strategies.files.pca.transform`).
A ``.bed`` is read as the model's variants (by ID, A1/A2 exchanged flipped, when its ``.bim`` lists them
otherwise); with ``--out site.eigenvec`` its people's scores are written on plink2's eigenvector scale (over the
model's singular values) in plink2's layout with the ``.fam``'s FID and IID (a ``.pgen``: likewise, with its
``.pvar`` and ``.psam``)
(:mod:`fl_strategies.files.plink_outputs`), and ``site.eigenvec.png`` draws PC1 against PC2 and PC3; after a run with
``outlier-sigma``, ``site.outliers`` lists the site's people removed as outliers (FID IID, recomputed from the model:
:func:`client_app.outlier_replies.removed_people`).

Nothing the user owns is written over: ``--out`` may never be the ``--data`` or ``--model`` file, an existing
``--out`` is refused unless ``--force``, a link at ``--out`` is refused even with ``--force``, and the scores are
written to a temporary file of mode 600 that is renamed into place once complete
(:func:`fl_strategies.files.plain_files.write_file`). One transform at a time writes an ``--out``
(:mod:`fl_strategies.files.folder_lock`: a second is refused naming the first); Ctrl-C or SIGTERM leave no
partial file (one line, exit status 130 or 143).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fl_strategies.files.data_files import is_genotype_file, open_samples
from fl_strategies.kernels.rows import BedVariants
from fl_strategies.files.pca import load_model, transform
from fl_strategies.files.plain_files import refuse_overwrite, write_file
from fl_strategies.files.plink_outputs import draw_ancestry, eigenvec_text, plink2_eigenvectors
from fl_strategies.files.folder_lock import FolderLock
from fl_strategies.settings.command_line import ArgumentParser, interruption, stop_signals
from fl_strategies.files.variants import as_variants, read_fam

from .outlier_replies import remove_file_text, removed_people

__all__ = ["main", "transform"]


EXAMPLES = """\
examples:
  {prog} --model out/pca.npz --data mydata/partition_0.npy --out scores_0.npy
  {prog} --model out/pca.npz --data site.bed --out site.eigenvec

  (scores: ((X - mean) / scale) @ components.T, as scikit-learn's PCA.transform; a .eigenvec gets plink2's
  layout and scale, with a picture site.eigenvec.png beside it)

exit status: 0 the scores are written, 2 a bad argument, model or data file (one line, nothing written)
"""


def main(argv: list[str] | None = None, prog: str = "python -m client_app.transform") -> int:
    """Command line: exit 0 with the scores written, 2 with one line naming the argument at fault.

    ``prog`` is the command's name in its usage and error lines (``fedspectral transform`` from
    :mod:`fedspectral.cli`).
    """
    parser = ArgumentParser(prog=prog, description="Apply a run's PCA model to rows on this node (the rows never "
                            "leave it).", epilog=EXAMPLES.format(prog=prog))
    parser.add_argument("--model", required=True, help="the run's pca.npz")
    parser.add_argument("--data", required=True, help="a .npy/.csv/.npz/.bed/.pgen file of rows (samples) on this node")
    parser.add_argument("--out", required=True, help="where to write the scores (.npy; a new file, mode 600), or "
                        "for a .bed/.pgen the samples' plink2 eigenvectors (.eigenvec, with a picture beside it)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out (never --data or --model)")
    args = parser.parse_args(argv)
    with stop_signals():  # SIGTERM and SIGHUP as Ctrl-C: the scores are written whole or not at all
        try:
            return _transform(args, prog)
        except KeyboardInterrupt as ex:
            print(f"{prog}: interrupted ({interruption(ex).name}): nothing was written to {args.out}",
                  file=sys.stderr)
            return interruption(ex).status


def _transform(args, prog: str) -> int:
    """:func:`main` after its arguments were parsed: check, transform and write, owning ``--out`` meanwhile."""
    lock = None
    try:
        eigenvec = args.out.lower().endswith(".eigenvec")
        if not (args.out.lower().endswith(".npy") or eigenvec and is_genotype_file(args.data)):
            raise ValueError(f"--out {args.out!r}: must name a .npy file (or a .eigenvec file for a .bed/.pgen --data)")
        picture = f"{args.out}.png"
        if not Path(args.out).resolve().parent.is_dir():
            raise ValueError(f"--out {args.out!r}: its folder does not exist")
        # one transform at a time writes --out: a second one is refused (naming the first) before it checks or
        # writes anything, so it cannot replace the first one's scores unasked
        lock = FolderLock(args.out, "--out", file=True, what=f"{prog} --out {args.out}").acquire()
        refuse_overwrite(args.out, "--out", {"--data": args.data, "--model": args.model}, args.force)
        if eigenvec:
            refuse_overwrite(picture, "--out's picture", {"--data": args.data, "--model": args.model}, args.force)
        model = load_model(args.model)
        X = open_samples(args.data, "--data")  # a .bed file stays on disk, read in its variant order
        if isinstance(X, BedVariants) and model.get("variants") is not None:
            X = as_variants(X, args.data, model["variants"], "--data")
        if not isinstance(X, BedVariants):
            X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
                scores = transform(model, X)
        except ValueError as ex:
            raise ValueError(f"--data {args.data!r}: {ex}") from None
        if not np.all(np.isfinite(scores)):  # the model is checked; rows far beyond its scale can still overflow
            raise ValueError(f"--data {args.data!r}: its scores under --model {args.model!r} are not all finite "
                             "(rows too large for the model's mean and scale)")
        removed = removed_people(args.model, model, X, args.data) if eigenvec else None
        if removed is not None:  # outlier-sigma: the site's removed people, recomputed here, beside the .eigenvec
            listed = str(Path(args.out).with_suffix(".outliers"))
            refuse_overwrite(listed, "--out's outlier list", {"--data": args.data, "--model": args.model}, args.force)
        if eigenvec:
            vectors = plink2_eigenvectors(scores, model)
            out = write_file(args.out, eigenvec_text(read_fam(args.data), vectors), private=True)
            if vectors.shape[1] >= 2:
                write_file(picture, lambda handle: draw_ancestry(handle, vectors, title=Path(args.data).name),
                           private=True)
            if removed is not None:
                write_file(listed, remove_file_text(removed), private=True)
                print(f"{len(removed)} people removed as outliers in the run: {listed}")
        else:
            out = write_file(args.out, lambda handle: np.save(handle, scores, allow_pickle=False), private=True)
    except (ValueError, OSError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    finally:
        if lock is not None:
            lock.release()
    print(f"{scores.shape[0]} rows -> {scores.shape[1]} components: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
