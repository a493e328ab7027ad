"""A TCP forwarder: ``python3 hack/tcp_forward.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT``.

The harness's real node lives in its own network namespace (cluster_realnode.py), where the apiserver's
127.0.0.1 is not reachable; this process (in the host namespace) accepts on the host end of the node's veth
and relays each connection byte for byte to the apiserver on 127.0.0.1 (TLS passes through untouched).
Runs until SIGTERM. Only the standard library.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(RuntimeError):  # loop closing
            writer.close()


async def main(listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            target_r, target_w = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, target_w), _pipe(target_r, client_w))

    server = await asyncio.start_server(handle, listen_host, listen_port, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"forwarding {listen_host}:{listen_port} -> {target_host}:{target_port}", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    host, port, thost, tport = sys.argv[1:5]
    asyncio.run(main(host, int(port), thost, int(tport)))
