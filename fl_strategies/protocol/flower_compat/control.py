"""Private Flower names for reading a run's status from a local SuperLink's Control API in-process.

``fedspectral run`` turns the run's final status into its exit code (``flwr run`` exits 0 even when the run
failed). ``flwr ls`` gives it, at a second or two of a new process's imports at every run's end; the same one
request made here costs a few milliseconds.
"""

from __future__ import annotations

from flwr.cli.cli_client_interceptor import CliClientHttpInterceptor
from flwr.proto.control_pb2 import ListRunsRequest  # pylint: disable=no-name-in-module
from flwr.supercore.control import ControlHttpClient

__all__ = ["list_run_status"]

# CliClientHttpInterceptor, ListRunsRequest, ControlHttpClient : from ``flwr.cli.cli_client_interceptor``,
#   ``flwr.proto.control_pb2``, ``flwr.supercore.control`` (flwr 1.42)
#   What: the client ``flwr ls`` makes its ``ListRuns`` request with (``flwr/cli/ls.py``,
#   ``flwr/cli/run_utils.py``: the CLI's client header, no account authentication on a local SuperLink).
#   Why: fedspectral.run.local_run_status reads the run's final status without a ``flwr ls`` process.
#   Public alternative: the ``flwr ls --format json`` command (what fedspectral run falls back to).


def list_run_status(address: str, run_id: int) -> str | None:
    """The status of run ``run_id`` on the SuperLink whose Control API is at ``address`` (``host:port``, plain
    HTTP), as ``flwr ls`` shows it (``status`` or ``status:sub-status``, e.g. ``finished:failed``); ``None`` when
    it does not answer or does not know the run."""
    client = ControlHttpClient.from_server_address(address, insecure=True, root_certificates=None,
                                                   interceptors=[CliClientHttpInterceptor()])
    try:
        runs = client.ListRuns(ListRunsRequest(run_id=int(run_id))).run_dict
    except Exception:  # pylint: disable=broad-exception-caught  # not answering, or an error reply: as flwr ls's
        return None
    finally:
        client.close()
    if int(run_id) not in runs:
        return None
    status = runs[int(run_id)].status
    return f"{status.status}:{status.sub_status}" if status.sub_status else status.status
