"""Where the time of an in-process ``secure-aggregation = true`` run goes (cProfile; timings are machine-dependent).

Runs the ``bench_secure_power`` set-up (``--setup``, ``--clients``, ``--dim``, ``--rounds``) once plain and once
secure on the in-process engine (:func:`simulations.engines.local.run_local`; a first run of each warms the
imports), the secure run under :mod:`cProfile`, and splits the secure run's profiled time into:

* the project's client work: the plain client's computation (``numpy_fit_mod``: the product, the limb encoding)
  and the seeded rounding around Flower's SecAgg+ client (``secaggplus_seeded`` minus ``secaggplus_mod``);
* Flower's SecAgg+ client stages (``secaggplus_mod`` minus the client's computation), of which Shamir's share
  creation (``create_shares``: a ``ThreadPoolExecutor`` per secret), the ECDH agreements (``generate_shared_key``),
  the PEM loads of the stage's keys and the masks (``pseudo_rand_gen``);
* Flower's SecAgg+ server workflow outside the clients (``SecAggPlusWorkflow.__call__`` minus the engine's
  ``push_messages``), of which Shamir's reconstruction (``combine_shares``);
* the rest (the project's server: discovery, aggregation, the loop).

cProfile profiles the thread it runs in (the in-process engine calls the clients there); work in Flower's Shamir
threads shows as the wait for them. The profiler slows pure-Python code more than C code, so the shares are
indicative. Prints a table and writes it (``profile.md``, with its command) to ``--out`` (default: a new folder,
:func:`simulations.benchmarks.out_folder`). Usage::

    python -m simulations.benchmarks.profile_secure_exchange [--setup model1] [--clients 4] [--dim 200]
        [--rounds 20] [--out FOLDER]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shlex
import sys
import time

from . import out_folder

__all__ = ["main", "split"]

PARTS = [  # (label, how to read it off the profile: a function's cumulative time, or a difference)
    ("secure run, profiled", "total"),
    ("project: client computation (product, limbs)", "client_app/app.py:numpy_fit_mod"),
    ("project: seeded rounding around the SecAgg+ client",
     "secure_rounding.py:secaggplus_seeded - secaggplus_mod.py:secaggplus_mod"),
    ("Flower SecAgg+ client stages (without the computation)",
     "secaggplus_mod.py:secaggplus_mod - client_app/app.py:numpy_fit_mod"),
    ("  of which Shamir share creation", "shamir.py:create_shares"),
    ("  of which ECDH key agreements", "symmetric_encryption.py:generate_shared_key"),
    ("  of which PEM loads of the stage's keys",
     "asymmetric.py:bytes_to_private_key + asymmetric.py:bytes_to_public_key"),
    ("  of which masks", "secaggplus_utils.py:pseudo_rand_gen"),
    ("Flower SecAgg+ server workflow (without the clients)",
     "secaggplus_workflow.py:__call__ - local.py:push_messages"),
    ("  of which Shamir reconstruction", "shamir.py:combine_shares"),
]


def _cumulative(stats: pstats.Stats, name: str) -> float:
    """Cumulative seconds of the functions whose ``file:function`` (or function) is ``name``."""
    file, _, func = name.rpartition(":")
    total = 0.0
    for (path, _, function), (_, _, _, cum, _) in stats.stats.items():
        if function == func and (not file or path.endswith("/" + file)):
            total += cum
    return total


def split(stats: pstats.Stats) -> list[tuple[str, float]]:
    """``(label, seconds)`` of :data:`PARTS` from a profile of one secure run."""
    out = []
    for label, spec in PARTS:
        if spec == "total":
            out.append((label, stats.total_tt))
            continue
        value, sign = 0.0, 1.0
        for token in spec.split():
            if token in "+-":
                sign = 1.0 if token == "+" else -1.0
            else:
                value += sign * _cumulative(stats, token)
        out.append((label, value))
    return out


def main(argv: list[str] | None = None) -> int:
    from fl_strategies.files.plain_files import write_file
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    from .bench_secure_power import SETUPS, _overrides

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", default="model1", choices=[s for s in SETUPS if s != "genotypes"])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--dim", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_folder("profile_secure_exchange", args.out)
    folder.mkdir(parents=True, exist_ok=True)
    walls = {}
    for secure in (False, True):
        cfg = fused_run_config(_overrides(args.setup, args.clients, args.dim, args.rounds, secure, None))
        run_local(cfg)  # warm-up
        profile = cProfile.Profile() if secure else None
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        strategy = run_local(cfg)
        if profile is not None:
            profile.disable()
        walls[secure] = time.perf_counter() - start
    exchanges = len(strategy.aggregated)
    parts = split(pstats.Stats(profile))
    total = parts[0][1]
    lines = [f"{args.setup}, m = {args.clients}, d = {args.dim}, {args.rounds} rounds: plain {walls[False]:.2f} s, "
             f"secure {walls[True]:.2f} s under the profiler ({exchanges} SecAgg+ exchanges)", "",
             "| part | seconds | share | ms per exchange |", "|---|---|---|---|"]
    for label, seconds in parts:
        lines.append(f"| {label} | {seconds:.3f} | {100 * seconds / total:.0f} % | {1000 * seconds / exchanges:.1f} |")
    lines.append(f"| plain run (not profiled) | {walls[False]:.3f} | | |")
    print("\n".join(lines))
    command = "python -m simulations.benchmarks.profile_secure_exchange " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    write_file(folder / "profile.md", command + "\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
