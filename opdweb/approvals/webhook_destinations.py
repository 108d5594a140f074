"""Where a team webhook may post: a public address, over https, to exactly the host it names.

A URL is checked when it is saved and again at every delivery (its name may resolve
elsewhere by then: DNS rebinding), and the delivery connects to the very address that was
checked.  Refused: loopback, private, shared (CGNAT), link-local (cloud metadata at
169.254.169.254), multicast, reserved and unspecified addresses, written as IPv4 or as an
IPv6 address that carries one (IPv4-mapped ``::ffff:0:0/96``, IPv4-compatible ``::/96``,
6to4 ``2002::/16``, NAT64 ``64:ff9b::/96``, Teredo ``2001::/32``: a router or relay may
deliver those to the IPv4 address inside, so that address is checked too; the local-use
NAT64 prefix ``64:ff9b:1::/48`` is refused whole), and plain http unless
``WEBHOOK_ALLOW_HTTP``.  ``WEBHOOK_ALLOWED_HOSTS`` lists ``host:port``
receivers an operator allows although they are not public (a receiver on the same host,
the tests' loopback server): an explicit setting, not a hole in the rule.  TLS is verified
against the system's CAs, or ``WEBHOOK_CA_FILE`` where an operator's receivers use a private CA.  Redirects are
never followed (a 3xx is a failed delivery) and a response is read up to
``MAX_RESPONSE_BYTES``.
"""
from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

MAX_RESPONSE_BYTES = 64 * 1024
#: Names of cloud metadata services, refused whatever they resolve to.
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.azure.com", "instance-data"})


class ForbiddenDestination(ValueError):
    pass


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int
    address: str  # the checked address the delivery connects to
    target: str  # path and query


NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: where the IPv4 sits depends on the network
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated, still routed by some stacks


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 transition address carries (see the module docstring)."""
    inside = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in NAT64 or (ip in IPV4_COMPATIBLE and int(ip) > 1):  # :: and ::1 are themselves
        inside.append(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
    return [v4 for v4 in inside if v4 is not None]


def _forbidden(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL_USE:
            return "local-use NAT64 (not public)"
        for v4 in _embedded_ipv4(ip):
            if (why := _forbidden(v4)) is not None:
                return why
    for what, hit in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                      ("unspecified", ip.is_unspecified), ("multicast", ip.is_multicast), ("private", ip.is_private),
                      ("reserved", ip.is_reserved), ("not public", not ip.is_global)):
        if hit:
            return what
    return None


def check_destination(url: str) -> Destination:
    """The destination ``url`` names, resolved and checked; raises ForbiddenDestination."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise ForbiddenDestination("must be an https:// URL")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ForbiddenDestination("has an invalid port") from None
    if not host:
        raise ForbiddenDestination("names no host")
    allowed = f"{host}:{port}" in settings.WEBHOOK_ALLOWED_HOSTS
    if host.rstrip(".") in METADATA_NAMES:
        raise ForbiddenDestination(f"{host} is a cloud metadata service")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ForbiddenDestination(f"{host} does not resolve ({exc})") from None
    addresses = [info[4][0] for info in infos]
    if not allowed:
        for address in addresses:
            why = _forbidden(ipaddress.ip_address(address.split("%", 1)[0]))
            if why:
                raise ForbiddenDestination(f"{host} resolves to {address}, a {why} address; webhooks go to "
                                           "public addresses only")
    if scheme == "http" and not (settings.WEBHOOK_ALLOW_HTTP or allowed):
        raise ForbiddenDestination("must be https:// (plain http is allowed only where the operator sets "
                                   "WEBHOOK_ALLOW_HTTP)")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Destination(scheme, host, port, addresses[0], target)


def post(destination: Destination, body: bytes, headers: dict, timeout: float) -> int:
    """POST ``body`` to the checked address of ``destination`` (TLS verified against its
    host name); the response status.  No redirect is followed."""
    raw = socket.create_connection((destination.address, destination.port), timeout=timeout)
    try:
        if destination.scheme == "https":
            context = ssl.create_default_context(cafile=settings.WEBHOOK_CA_FILE or None)
            raw = context.wrap_socket(raw, server_hostname=destination.host)
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                destination.host, destination.port, timeout=timeout)
        else:
            connection = http.client.HTTPConnection(destination.host, destination.port, timeout=timeout)
        connection.sock = raw
        connection.request("POST", destination.target, body=body, headers=headers)
        response = connection.getresponse()
        response.read(MAX_RESPONSE_BYTES)
        return response.status
    finally:
        raw.close()
