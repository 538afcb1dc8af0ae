#!/usr/bin/env python3
"""Baseline broadcast server for bench/run.sh ws-broadcast: Python `websockets` (asyncio), one process.

Every text or binary message a client sends is broadcast to every other connected client with
websockets.broadcast() (the library's fast path: no per-client await). Prints
"py_broadcast ready port=N" once listening.

    python3 bench/py_broadcast.py [--port 0] [--host 127.0.0.1]
"""
import argparse
import asyncio
import sys

from websockets.asyncio.server import broadcast, serve

clients = set()


async def handler(ws):
    clients.add(ws)
    try:
        async for message in ws:
            broadcast([c for c in clients if c is not ws], message)
    finally:
        clients.discard(ws)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    async with serve(handler, args.host, args.port, compression=None, max_queue=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"py_broadcast ready port={port}", flush=True)
        await asyncio.get_running_loop().create_future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
