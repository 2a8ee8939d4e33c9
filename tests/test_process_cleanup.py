"""The conftest fixture that stops what a deploy / ray test left running finds exactly that test's processes."""

import os
import subprocess
import sys
import time

from conftest import PROCESS_TAG, _stop, tagged_flower_processes


def test_only_the_processes_carrying_this_tests_tag_are_found_and_stopped():
    """Two detached look-alikes of a Flower process (their command line names ``flwr-simulation``), one started
    with this test's tag and one with another run's: only the first is found, and stopping it leaves the other."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "flwr-simulation"]
    ours = subprocess.Popen(sleeper, env={**os.environ, PROCESS_TAG: "ours"}, start_new_session=True)
    theirs = subprocess.Popen(sleeper, env={**os.environ, PROCESS_TAG: "theirs"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not tagged_flower_processes("ours") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid, _ in tagged_flower_processes("ours")] == [ours.pid]
        assert tagged_flower_processes("nobody") == []
        _stop([ours.pid])
        assert ours.wait(timeout=10) is not None and theirs.poll() is None
        assert [pid for pid, _ in tagged_flower_processes("theirs")] == [theirs.pid]
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()


def test_a_leftover_supernode_launcher_or_fork_server_is_found_as_a_flower_process():
    """``deploy`` and ``fedspectral supernode`` start SuperNodes through ``launchers/supernode.py`` and ClientApps
    through ``launchers/forkserver.py``: look-alikes named by those scripts' paths are found and stopped."""
    from fedspectral.supernode import LAUNCHERS_DIR

    lookalikes = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(LAUNCHERS_DIR / name)],
                                   env={**os.environ, PROCESS_TAG: "launchers"}, start_new_session=True)
                  for name in ("supernode.py", "forkserver.py")]
    try:
        deadline = time.monotonic() + 10
        while len(tagged_flower_processes("launchers")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(pid for pid, _ in tagged_flower_processes("launchers")) == sorted(p.pid for p in lookalikes)
        _stop([p.pid for p in lookalikes])
        assert all(p.wait(timeout=10) is not None for p in lookalikes)
    finally:
        for proc in lookalikes:
            proc.kill()
            proc.wait()
