"""The web server: daphne, with flow control on streamed HTTP bodies.

    python -m opdweb.web_server -b 127.0.0.1 -p 8000 opdweb.asgi:application

Daphne writes each body chunk the application sends into Twisted's transport and returns
at once, so an application streaming to a reader slower than itself (a 1M-point export to
a client on a slow link, or one that stopped reading) piles the unread rest up in the
server's memory: the whole body, in the end.  Here the application's ``send`` of a body
chunk waits while the connection's send buffer is full (at most one chunk waits in the
server): a push producer registered on the request is paused and resumed by the
transport, as Twisted's own file responses are.  The
export's generator, and the database cursor behind it, wait with it.

Everything else (options, websockets, timeouts) is daphne's own command line.
"""
from __future__ import annotations

import asyncio
import weakref

from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

#: What a streamed response may have written and the client not yet taken, per connection.
SEND_BUFFER_BYTES = 1 << 20


@implementer(IPushProducer)
class SendValve:
    """Open while the connection can take more; the transport closes and opens it."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()

    def pauseProducing(self) -> None:
        self.open.clear()

    def resumeProducing(self) -> None:
        self.open.set()

    def stopProducing(self) -> None:  # the connection is going: let the application's send return
        self.open.set()


class FlowControlledServer(Server):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.valves: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def handle_reply(self, protocol, message):
        """A body chunk waits until the connection took the one before it (so the
        application makes the next chunk while this one drains), then is written."""
        if message.get("type") != "http.response.body":
            return await super().handle_reply(protocol, message)
        more = message.get("more_body", False)
        valve = self.valves.get(protocol)
        if valve is not None:
            await valve.open.wait()
            if not more:  # the last chunk: the request lets its producer go first
                del self.valves[protocol]
                if not protocol.finished and not protocol._disconnected:
                    protocol.unregisterProducer()
        await super().handle_reply(protocol, message)
        if more and valve is None and not protocol.finished and not protocol._disconnected:
            self.valves[protocol] = SendValve()
            protocol.registerProducer(self.valves[protocol], True)
            # Twisted pauses past 64 KiB; a streamed body goes faster with more in flight.
            protocol.channel.transport.bufferSize = SEND_BUFFER_BYTES


class WebServerCommand(CommandLineInterface):
    server_class = FlowControlledServer


if __name__ == "__main__":
    WebServerCommand.entrypoint()
