"""A minimal keep-alive HTTP/1.1 client for bursts: httpx's own overhead would dominate them.

Only what the tests need: POST a JSON body, read a response framed by content-length.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator


async def _post_loop(
    host: str, port: int, path: str, body: bytes, jobs: Iterator[int], statuses: list[int]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    try:
        for _ in jobs:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split()[1])
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            statuses.append(status)
    finally:
        writer.close()


async def burst(url: str, path: str, body: bytes, count: int, concurrency: int) -> list[int]:
    """Send `count` POSTs over `concurrency` keep-alive connections; return the status codes."""
    hostport = url.removeprefix("http://").rstrip("/")
    host, _, port = hostport.partition(":")
    jobs = iter(range(count))
    statuses: list[int] = []
    await asyncio.gather(
        *(_post_loop(host, int(port), path, body, jobs, statuses) for _ in range(concurrency))
    )
    return statuses
