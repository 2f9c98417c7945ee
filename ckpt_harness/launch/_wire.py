"""Length-prefixed pickle frames between the harness and its warm fork server.

Both ends are ours and run the same code, so pickle is safe here; frames keep
a message boundary on a stream socket without a parser.
"""

from __future__ import annotations

import pickle
import socket
import struct
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
