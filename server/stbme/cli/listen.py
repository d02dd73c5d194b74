"""The server's listening socket, bound before anything else happens: a port in use is one line of advice,
before the banner and before a data directory or a lock file is created."""

from __future__ import annotations

import errno
import os
import socket

import click


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a ClickException saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise click.ClickException(f"cannot listen on {host!r}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        if os.name == "posix":  # a restart reuses the port at once; on Windows this would let two servers share it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", -1)):
            raise click.ClickException(
                f"port {port} on {host} is in use (another sidecar, or another program): stop it, or start this "
                "one with another --port (and set that port in the extension's settings)") from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
