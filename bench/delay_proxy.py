"""A TCP proxy that delays what clients send and counts what servers answer: a
remote store's time to first byte in front of a service that speaks its own
protocol (HDFS's namenode RPC and datanode transfer), where bench/count_proxy.py
relays HTTP.

    python delay_proxy.py LISTEN=UPSTREAM [LISTEN=UPSTREAM ...] --count FILE [--delay-ms N]

Each LISTEN (HOST:PORT) is relayed to its UPSTREAM (HOST:PORT). Every chunk a
client sends reaches the server N ms after it arrived, in order, while later
chunks keep arriving (requests in flight together are each delayed, side by
side, not one after another); answers pass at once. The bytes servers sent to
clients, over all listeners, are written to FILE after each chunk. Stops on
SIGTERM or SIGINT.
"""
import argparse
import asyncio
import signal
import time

TOTAL = {"bytes": 0}


def address(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("routes", nargs="+", help="LISTEN=UPSTREAM, each HOST:PORT")
    ap.add_argument("--count", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args()
    delay = args.delay_ms / 1000.0

    def counted(n):
        TOTAL["bytes"] += n
        with open(args.count, "w") as f:
            f.write(str(TOTAL["bytes"]))

    async def delayed(reader, writer):
        # Chunks are queued with their arrival time and sent once it is
        # `delay` old: reading goes on meanwhile.
        queue = asyncio.Queue()

        async def pump():
            while True:
                at, chunk = await queue.get()
                if chunk is None:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                wait = at + delay - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(pump())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((time.monotonic(), chunk))
        finally:
            queue.put_nowait((time.monotonic(), None))
            await sender

    async def answers(reader, writer):
        try:
            while chunk := await reader.read(262144):
                counted(len(chunk))
                writer.write(chunk)
                await writer.drain()
        finally:
            if writer.can_write_eof():
                writer.write_eof()

    def handler(upstream):
        async def handle(client_r, client_w):
            try:
                server_r, server_w = await asyncio.open_connection(*upstream)
            except OSError:
                client_w.close()
                return
            try:
                await asyncio.gather(
                    delayed(client_r, server_w), answers(server_r, client_w)
                )
            except (ConnectionError, OSError):
                pass
            finally:
                server_w.close()
                client_w.close()

        return handle

    servers = []
    for route in args.routes:
        listen, _, upstream = route.partition("=")
        host, port = address(listen)
        servers.append(
            await asyncio.start_server(handler(address(upstream)), host, port, backlog=128)
        )
    counted(0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
