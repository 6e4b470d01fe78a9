"""The parts of `serve --workers` that need no fork: the shared listening sockets and how a
worker's end is told (the forking supervisor runs as real processes in
tests/e2e/test_serve_workers.py)."""

from __future__ import annotations

import signal
import socket

import pytest

from proxy.app.serve import ListenError, listen
from proxy.app.workers import _described, restart_waits, reuse_port_listeners


def test_the_workers_sockets_share_one_port_even_when_the_port_is_chosen_by_the_kernel() -> None:
    listeners = reuse_port_listeners("127.0.0.1", 0, 3)
    try:
        ports = {listener.getsockname()[1] for listener in listeners}
        assert len(listeners) == 3 and len(ports) == 1
        assert all(
            listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for listener in listeners
        )
        # Each accepts connections the kernel hands it: connect until every socket got one.
        port = ports.pop()
        served: set[int] = set()
        clients = []
        for _ in range(200):
            clients.append(socket.create_connection(("127.0.0.1", port)))
            for i, listener in enumerate(listeners):
                listener.setblocking(False)
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    continue
                conn.close()
                served.add(i)
            if len(served) == 3:
                break
        for client in clients:
            client.close()
        assert served == {0, 1, 2}
    finally:
        for listener in listeners:
            listener.close()


def test_a_port_held_without_reuse_port_fails_every_worker_socket_at_once() -> None:
    holder = listen("127.0.0.1", 0)
    try:
        with pytest.raises(ListenError, match="is in use"):
            reuse_port_listeners("127.0.0.1", holder.getsockname()[1], 2)
    finally:
        holder.close()


def test_a_workers_end_is_described_by_its_code_or_its_signal() -> None:
    assert _described(0) == "exit code 0"
    assert _described(1) == "exit code 1"
    assert _described(-signal.SIGKILL) == "killed by SIGKILL"


def test_restart_waits_double_to_30_s_and_start_over_after_a_minute_up() -> None:
    waits, planned = [], 0.5
    for _ in range(9):  # a worker that dies at once, again and again
        wait, planned = restart_waits(planned, up_s=1.0)
        waits.append(wait)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert restart_waits(30.0, up_s=59.0) == (30.0, 30.0)
    assert restart_waits(30.0, up_s=60.0) == (0.5, 1.0)  # it had stayed up: from the start
