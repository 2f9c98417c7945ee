"""Length-prefixed pickle frames between the harness and its warm fork server.

Both ends are ours and run the same code, so pickle is safe here; frames keep
a message boundary on a stream socket without a parser.
"""

from __future__ import annotations

import pickle
import socket
import struct
import subprocess
from typing import Any

_HEADER = struct.Struct("!I")


def send(sock: socket.socket, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def recv(sock: socket.socket) -> Any:
    """Read one frame; raise EOFError when the other end is gone."""
    (size,) = _HEADER.unpack(_read_exactly(sock, _HEADER.size))
    return pickle.loads(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def shut_down(sock: socket.socket, proc: Any, wait: float) -> None:
    """End a server of ours at the other end of `sock`: ask it to shut down,
    and kill and reap it (`proc.reap`, `_proc.Child`'s or a forked server's)
    where it cannot be asked or does not exit within `wait` seconds. The
    fork server and the agent server end the same way."""
    if proc.poll() is not None:
        return
    try:
        send(sock, {"op": "shutdown"})
        proc.wait(timeout=wait)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.reap()
