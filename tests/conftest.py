"""Shared helpers: run the app end to end on the in-process engine."""

from __future__ import annotations

import logging
import os
import uuid
import warnings

import numpy as np
import pytest

import flwr.common  # noqa: F401  (sets Flower's logger up before we quiet it)

logging.getLogger("flwr").setLevel(logging.WARNING)


def failures_and_rejected(strategy) -> tuple[int, int]:
    """``(sum of failures, sum of rejected)`` over the strategy's result rows (0 for a column it lacks)."""
    records = getattr(strategy, "records", None) or []
    return (int(sum(r.get("failures") or 0 for r in records)), int(sum(r.get("rejected") or 0 for r in records)))


def assert_no_failures(strategy) -> None:
    """No client failed and no reply was rejected in any round."""
    failures, rejected = failures_and_rejected(strategy)
    assert (failures, rejected) == (0, 0), f"{failures} failure(s) and {rejected} rejected reply(ies) in the run"


def run_app(fault_fn=None, node_ids=None, observer=None, expect_clean=None, **overrides):
    """Run the ServerApp and ClientApp in-process with run-config overrides; return the strategy.

    Unless the test is about failures (``fault_fn`` or ``dropout`` given, or ``expect_clean=False``), the run must
    end with no failure and no rejected reply: a bug that makes every client fail leaves many numbers unchanged.
    """
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    strategy = run_local(cfg, fault_fn=fault_fn, node_ids=node_ids, observer=observer)
    if expect_clean is None:  # a test about failures injects them (fault_fn) or draws them (dropout)
        expect_clean = fault_fn is None and not overrides.get("dropout")
    if expect_clean:
        assert_no_failures(strategy)
    return strategy


def run_aborted(match: str = "", **overrides):
    """Run the app expecting its strategy to abort: the ServerApp raises ``RunFailed``; return the strategy."""
    from fl_strategies.protocol.base import RunFailed

    with pytest.raises(RunFailed, match=match) as info:
        run_app(**overrides)
    strategy = info.value.strategy
    assert strategy.stopped and strategy.failure == str(info.value)
    return strategy


def distances(strategy) -> np.ndarray:
    """Subspace distance after each round (index 0 = initial estimate)."""
    return np.array([r["subspace_distance"] for r in strategy.records])


class RepliedGrid:
    """A fake grid's messages and replies, mixed in before a Flower grid class: :meth:`push_messages` keeps the
    messages (``sent``) and names them ``m0``, ``m1``, ...; :meth:`replies` is one empty TRAIN reply to each."""

    def push_messages(self, messages):
        self.sent = list(messages)
        return [f"m{i}" for i in range(len(self.sent))]

    def replies(self):
        from flwr.app import Message, MessageType, RecordDict

        replies = []
        for i, _ in enumerate(self.sent):
            reply = Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)
            reply.metadata.__dict__["_reply_to_message_id"] = f"m{i}"
            replies.append(reply)
        return replies


@pytest.fixture
def app():
    return run_app


# -- Flower processes of deploy / ray tests ---------------------------------------------------------------------
PROCESS_TAG = "FEDSPECTRAL_TEST_PROCESS_TAG"
"""Environment variable that marks every process a deploy / ray test starts (children inherit it)."""
FLOWER_PROGRAMS = ("flower-superlink", "flower-supernode", "flower-superexec", "flwr-serverapp", "flwr-clientapp",
                   "flwr-simulation", "/flwr ", "flwr run", "launchers/supernode.py", "launchers/forkserver.py")
"""What a Flower process's command line names: Flower's programs, and fedspectral's launchers that start them
(``fedspectral/launchers/``: ``deploy`` and ``fedspectral supernode`` start the SuperNode as ``supernode.py``,
the ClientApps' fork server as ``forkserver.py``; the ``flwr-clientapp`` launcher has Flower's name)."""


def tagged_processes(tag: str, programs: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """``(pid, command line)`` of the live processes whose environment carries ``PROCESS_TAG=tag`` (of
    ``programs`` only, when given: a process whose command line names one of them).

    Flower starts its SuperLink (``flwr run``'s local one), SuperExec and ServerApp processes detached (new
    sessions, re-parented to init when their parent exits), so they are found by the environment they inherited
    from the test, not by ancestry; processes of other users or of other test runs (another tag) never match, and
    an exited process no one has reaped yet (a zombie) is not counted.
    """
    found = []
    needle = f"{PROCESS_TAG}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                args = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours
            continue
        if not programs or any(program in args + " " for program in programs):
            found.append((int(entry), args.strip()))
    return found


def tagged_flower_processes(tag: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of the Flower processes whose environment carries ``PROCESS_TAG=tag``
    (:func:`tagged_processes` of :data:`FLOWER_PROGRAMS`)."""
    return tagged_processes(tag, FLOWER_PROGRAMS)


def _stop(pids: list[int]) -> None:
    from simulations.engines.flwr_run import terminate

    terminate(pids)


@pytest.fixture(autouse=True)
def flower_processes(request, monkeypatch):
    """For ``deploy`` and ``ray`` tests: free ports for Flower's local SuperLink, and no Flower process left behind.

    Before the test: a unique ``FEDSPECTRAL_TEST_PROCESS_TAG`` in the environment (inherited by every process the
    test starts, detached ones included), and Flower's own variables for the local SuperLink that a plain
    ``flwr run`` starts (``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``, ``FLWR_LOCAL_CONTROL_API_PORT``,
    ``flwr/cli/constant.py``) set to free ports, so that two test runs on one machine do not meet on 39091.
    Deployments (:class:`simulations.engines.deploy.LocalDeployment`) take free ports by themselves.

    After the test: every Flower process carrying this test's tag (a SuperLink, SuperNode, SuperExec, ServerApp,
    ClientApp or simulation process that a failed run left behind) is stopped (SIGTERM, then SIGKILL), with a
    warning naming it. Processes started by anything else (another agent's test run) do not carry the tag and
    are never touched.
    """
    if request.node.get_closest_marker("deploy") is None and request.node.get_closest_marker("ray") is None:
        yield None
        return
    from simulations.engines.deploy import free_port_block

    tag = uuid.uuid4().hex
    monkeypatch.setenv(PROCESS_TAG, tag)
    base = free_port_block(4)
    monkeypatch.setenv("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", str(base))
    monkeypatch.setenv("FLWR_LOCAL_CONTROL_API_PORT", str(base + 2))
    yield tag
    left = tagged_flower_processes(tag)
    if left:
        warnings.warn(f"{request.node.nodeid} left {len(left)} Flower process(es) running; stopped: "
                      + "; ".join(f"{pid} {args[:160]}" for pid, args in left), stacklevel=1)
        _stop([pid for pid, _ in left])


@pytest.fixture
def every_iterate(monkeypatch):
    """Strategies keep every round's estimate (the server keeps ``Z_0`` and the newest two), for a test that
    compares each round's estimate with a reference."""
    from fl_strategies.protocol.base import FederatedStrategy

    monkeypatch.setattr(FederatedStrategy, "ITERATES_KEPT", None)
