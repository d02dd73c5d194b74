"""Web origins, Host names and URLs as the sidecar compares them: the browser checks (api/middleware.py)
and the settings that configure them (server.cors_origins, server.allowed_hosts) share these rules."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """Whether a bind address or host name is this machine only (localhost, 127.0.0.0/8, ::1)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normalize_origin(text: str) -> str | None:
    """`scheme://host[:port]` lower-cased without a default port (what browsers send in `Origin`), or
    None when the text is not an http(s) origin (a path, a query, user info, `null`)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    scheme = parts.scheme.lower()
    return f"{scheme}://{host}" if port in (None, DEFAULT_PORTS[scheme]) else f"{scheme}://{host}:{port}"


def host_name(host_header: str) -> str | None:
    """The name of a `Host` header without its port (`[::1]:8765` -> `::1`), lower-cased; None if malformed."""
    try:
        parts = urlsplit("//" + host_header.strip())
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query:
        return None
    return parts.hostname.lower().rstrip(".")


def check_origins(values: list[str]) -> None:
    """server.cors_origins: each entry an origin or `*` (ValueError naming the first that is not)."""
    for value in values:
        if value != "*" and normalize_origin(value) is None:
            raise ValueError(f"{value!r} is not an origin: write scheme://host[:port] with no path, "
                             "e.g. http://127.0.0.1:8000 (or * for any page, honoured only with a token)")


def _is_host_name(value: str) -> bool:
    try:
        ipaddress.ip_address(value.strip("[]"))
        return True
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    return len(value) <= 253 and all(
        0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-"
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in label) for label in labels)


def check_host_names(values: list[str]) -> None:
    """server.allowed_hosts: bare host names or addresses, no scheme, port or path."""
    for value in values:
        if not _is_host_name(value.strip()):
            raise ValueError(f"{value!r} is not a host name: write a bare name such as st-box.lan or "
                             "192.168.1.20 (no scheme, port or path)")


def check_http_url(value: str) -> None:
    """An empty string, or an http(s) URL with a host (the base URL of an API)."""
    if not value:
        return
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL, e.g. http://127.0.0.1:11434/v1")
