"""``fedspectral run`` reads its run's final status from the local SuperLink's Control API itself (no ``flwr ls``).

A stand-in for the SuperLink's ``ListRuns`` endpoint (``/v1/control/list-runs`` of flwr 1.42, protobuf over HTTP)
answers as Flower's does; every test fails if a process is started for the status.
"""

from __future__ import annotations

import http.server
import subprocess
import threading

import pytest
from flwr.proto.control_pb2 import ListRunsRequest, ListRunsResponse  # pylint: disable=no-name-in-module

from simulations.engines import flwr_run
from simulations.engines.flwr_run import PORT_VARIABLE, flower_env, run_status


@pytest.fixture
def control_api(monkeypatch):
    """A local SuperLink's Control API on a free port: ``statuses`` are the replies, one a request (the last
    repeated; ``(status, sub_status)``, or ``None`` for a run it does not know); ``requests`` the run ids asked."""
    state = {"statuses": [], "requests": [], "headers": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            asked = ListRunsRequest.FromString(self.rfile.read(int(self.headers["content-length"])))
            state["requests"].append((self.path, asked.run_id))
            state["headers"].append(dict(self.headers))
            statuses = state["statuses"]
            answer = statuses.pop(0) if len(statuses) > 1 else statuses[0]
            reply = ListRunsResponse()
            if answer is not None:
                reply.run_dict[asked.run_id].run_id = asked.run_id
                reply.run_dict[asked.run_id].status.status, reply.run_dict[asked.run_id].status.sub_status = answer
            body = reply.SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/protobuf")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(PORT_VARIABLE, str(server.server_address[1]))

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started for the run's status: {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    yield state
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("sub_status", ["completed", "failed", "stopped"])
def test_the_final_status_is_read_from_the_superlink_as_flwr_ls_shows_it(control_api, sub_status):
    control_api["statuses"] = [("finished", sub_status)]
    assert run_status("8748988537294730976", flower_env(), wait=10) == f"finished:{sub_status}"
    assert control_api["requests"] == [("/v1/control/list-runs", 8748988537294730976)]
    assert control_api["headers"][0].get("x-flwr-client") == "cli"  # as flwr ls's client sends it


def test_a_run_not_finished_yet_is_asked_again_until_it_has(control_api, monkeypatch):
    monkeypatch.setattr(flwr_run.time, "sleep", lambda seconds: None)
    control_api["statuses"] = [("starting", ""), ("running", ""), ("finished", "completed")]
    assert run_status("7", flower_env(), wait=10) == "finished:completed"
    assert [run_id for _, run_id in control_api["requests"]] == [7, 7, 7]


def test_a_run_the_local_superlink_does_not_know_is_read_with_flwr_ls(control_api, monkeypatch):
    """A ``FLWR_HOME`` whose default connection is not the local SuperLink: ``flwr ls`` asks the one ``flwr run``
    used, as before."""
    asked = []

    def flwr_ls(cmd, **kwargs):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout='{"runs": [{"status": "finished:failed"}]}', stderr="")

    monkeypatch.setattr(subprocess, "run", flwr_ls)
    control_api["statuses"] = [None]
    assert run_status("7", flower_env(), wait=10) == "finished:failed"
    assert asked == [["flwr", "ls", "--format", "json", "--run-id", "7"]] and len(control_api["requests"]) == 1


def test_a_superlink_that_does_not_answer_gives_unknown(monkeypatch):
    from simulations.engines.deploy import free_port_block

    monkeypatch.setenv(PORT_VARIABLE, str(free_port_block(1)))  # nothing listens there
    assert flwr_run.local_run_status("7", flower_env()) == "unknown"
