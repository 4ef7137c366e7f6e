"""A WebSocket echo server (the `websockets` library's asyncio server): the upstream the proxy's
WebSocket tunnelling is tested against.

    python3 ws_echo.py [--port N | --unix PATH]

Paths:

    any path         every message back as it came: text as text, binary as binary; the close
                     handshake is the library's (the client's code is echoed in the server's Close)
    /headers         first one text message, JSON {"path", "headers"}: the handshake request as
                     the server saw it (fields in order, repeats kept), then the echo
    /close/CODE      the server starts the close handshake at once with CODE (1000, 4000-4999)

Each connection that ends after its echo logs `closed PATH code CODE` on stderr once its TCP
connection is closed.

Messages up to 64 MiB; permessage-deflate is offered as the library does by default.
"""

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


async def handler(ws):
    path = ws.request.path
    if path.startswith("/close/"):
        code = int(path.removeprefix("/close/"))
        await ws.close(code, "closing as asked")
        return
    if path == "/headers":
        headers = [[k, v] for k, v in ws.request.headers.raw_items()]
        await ws.send(json.dumps({"path": path, "headers": headers}))
    from websockets.exceptions import ConnectionClosed

    try:
        async for message in ws:
            await ws.send(message)
    except ConnectionClosed:
        pass  # without a Close frame (code 1006): logged all the same
    # The tests read this line from the log: the close reached the server and its TCP
    # connection is gone.
    await ws.wait_closed()
    print(f"closed {path} code {ws.close_code}", file=sys.stderr, flush=True)


async def serve(args):
    from websockets.asyncio.server import serve as ws_serve

    sock = common.listen(args)
    async with ws_serve(handler, sock=sock, max_size=MAX_MESSAGE_BYTES) as server:
        common.ready(common.where(sock, "ws"))
        await server.serve_forever()


def main():
    args = common.arguments("WebSocket echo server (websockets)")
    common.watch_stdin()
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
