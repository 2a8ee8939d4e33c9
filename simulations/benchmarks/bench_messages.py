"""Where one client message's time goes in the in-process engine: Flower's legacy glue against ``fit_records``.

Sends the same FedPower fit instruction (``Z`` of shape ``dim x 5``) to each
of ``clients`` in-process nodes (lazy Model I data, ``rows x dim`` blocks,
cached ``A_i``), one message at a time, and times each stage of the exchange,
in microseconds per message:

* ``instruction``: ``FitIns`` -> message content (server);
* ``message``: the ``Message`` object;
* ``client``: the ClientApp, from message to reply (mods, ``client_fn``, the
  NumPyClient's ``fit`` and the reply's content);
* ``reply``: reply content -> ``FitRes`` (server);
* ``decode``: the reply's array checked and decoded (server).

``flower`` is Flower's own path (``recorddict_compat`` on the server, the
legacy message handler in the ClientApp); ``fit_records`` is what fedspectral
runs (:mod:`fl_strategies.protocol.fit_records`: the same layout built and read
directly). The best of ``--repeats`` passes is printed, and the ratio of the
totals. Usage::

    python -m simulations.benchmarks.bench_messages [--clients 1000] [--rows 1000] [--dim 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

__all__ = ["main", "stage_times"]

STAGES = ("instruction", "message", "client", "reply", "decode")


def stage_times(path: str, clients: int, rows: int, dim: int, repeats: int) -> dict[str, float]:
    """Microseconds per message of each stage (best pass of ``repeats``) for ``path`` = flower | fit_records."""
    import flwr.common  # noqa: F401  (sets Flower's logger up before it is quieted)
    from flwr.app import Message
    from flwr.client import ClientApp
    from flwr.common import FitIns, ndarrays_to_parameters
    from threadpoolctl import threadpool_limits

    from client_app.app import app, client_fn, mods, numpy_fit_mod
    from fl_strategies.protocol.fit_records import fitins_content, fitres_from_content
    from fl_strategies.protocol.flower_compat import recorddict_compat as compat
    from fl_strategies.protocol.replies import decode_arrays

    from simulations.benchmarks.bench_scale import _overrides
    from simulations.engines import fused_run_config
    from simulations.engines.local import LocalGrid, run_local

    logging.getLogger("flwr").setLevel(logging.WARNING)
    over = _overrides(clients, rows, dim, 1)
    run_local(fused_run_config(over))  # builds the per-process caches (A_i, validated config)
    if path == "flower":
        client_app = ClientApp(client_fn=client_fn, mods=[m for m in mods if m is not numpy_fit_mod])
        to_content, to_res = (lambda ins: compat.fitins_to_recorddict(ins, keep_input=True),
                              lambda content: compat.recorddict_to_fitres(content, keep_input=False))
    else:
        client_app, to_content, to_res = app, fitins_content, fitres_from_content
    grid = LocalGrid(client_app, clients, fused_run_config(over))
    Z = np.linalg.qr(np.random.default_rng(0).standard_normal((dim, 5)))[0]
    ins = FitIns(ndarrays_to_parameters([Z]), {"round": 1, "local-steps": 1, "iteration-offset": 0})
    best = {s: float("inf") for s in STAGES}
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(repeats):
            t = dict.fromkeys(STAGES, 0.0)
            for nid in grid.node_ids:
                t0 = time.perf_counter()
                content = to_content(ins)
                t1 = time.perf_counter()
                msg = Message(content=content, message_type="train", dst_node_id=nid, group_id="1")
                msg.metadata.__dict__["_message_id"] = f"m{nid}"
                t2 = time.perf_counter()
                reply = client_app(msg, grid.contexts[nid])
                t3 = time.perf_counter()
                res = to_res(reply.content)
                t4 = time.perf_counter()
                arrays = decode_arrays(res, 1)
                t5 = time.perf_counter()
                if isinstance(arrays, str):
                    raise RuntimeError(f"node {nid}: {arrays}")
                for s, dt in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    t[s] += dt
            if sum(t.values()) < sum(best.values()):
                best = t
    return {s: 1e6 * v / clients for s, v in best.items()}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m simulations.benchmarks.bench_messages",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1000, help="rows per client")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if min(args.clients, args.rows, args.dim, args.repeats) < 1 or args.dim < 5:
        parser.error("--clients, --rows and --repeats must be >= 1 and --dim >= 5")
    rows = {p: stage_times(p, args.clients, args.rows, args.dim, args.repeats) for p in ("flower", "fit_records")}
    print(f"microseconds per message, {args.clients} clients, {args.rows} x {args.dim} blocks, best of "
          f"{args.repeats}\n")
    print("| path | " + " | ".join(STAGES) + " | total |")
    print("|---" * (len(STAGES) + 2) + "|")
    for p, t in rows.items():
        print(f"| {p} | " + " | ".join(f"{t[s]:.1f}" for s in STAGES) + f" | {sum(t.values()):.1f} |")
    ratio = sum(rows["flower"].values()) / sum(rows["fit_records"].values())
    print(f"\nflower / fit_records: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
