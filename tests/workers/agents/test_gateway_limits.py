"""What a client can make an engine's agent gateway hold before any token is checked: an unfinished
header, a body, connections. The gateway's own server (`serve`) and body reader (`json_body`) on a small
app in this process, so the process's memory is the server's."""

import asyncio

import psutil
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from workers.agents.gateway import MAX_HEADER_BYTES, GatewayError, json_body, serve

LIMIT = 1024


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request):
        try:
            body = await json_body(request, LIMIT)
        except GatewayError as error:
            return JSONResponse({"error": str(error)}, status_code=error.status)
        return {"keys": sorted(body)}

    @app.get("/ok")
    async def ok():
        return {"ok": True}

    return app


async def _served(max_connections: int = 8):
    server, task, url = await serve(_app(), "127.0.0.1", max_connections)
    return server, task, int(url.rsplit(":", 1)[1])


async def _stop(server, task) -> None:
    server.should_exit = True
    await asyncio.wait_for(task, 10)


async def _status(port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return int(line.split()[1])


def test_an_unfinished_oversized_header_is_cut_off_with_memory_bounded():
    async def main():
        server, task, port = await _served()
        rss = psutil.Process().memory_info().rss
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        chunk, sent, cut_off = b"a" * (1 << 20), 0, False
        try:
            writer.write(b"POST /echo HTTP/1.1\r\nHost: gateway\r\nX-Filler: ")
            while sent < 50 << 20:  # 50 MiB of one header, never finished
                writer.write(chunk)
                await asyncio.wait_for(writer.drain(), 10)
                sent += len(chunk)
        except (ConnectionError, TimeoutError):
            cut_off = True
        try:  # the server's last word, if it got out before the reset, then the connection's end
            answer = await asyncio.wait_for(reader.read(), 10)
        except ConnectionError:
            answer = b""
        grown = psutil.Process().memory_info().rss - rss
        writer.close()
        await _stop(server, task)
        return cut_off, sent, answer, grown

    cut_off, sent, answer, grown = asyncio.run(main())
    assert cut_off and sent < 50 << 20, f"the server took {sent} bytes of one header"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4")
    assert grown < 32 << 20, f"the process grew by {grown >> 20} MiB for an unfinished header (cap {MAX_HEADER_BYTES} bytes)"


def test_a_body_over_the_limit_is_refused_whether_declared_or_streamed():
    async def main():
        server, task, port = await _served()
        declared = await _status(port, b"POST /echo HTTP/1.1\r\nHost: g\r\nContent-Length: 10485760\r\n\r\n")
        over = b"{" + b'"k": "' + b"x" * (2 * LIMIT) + b'"}'
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (over[:600], over[600:])) + b"0\r\n\r\n"
        streamed = await _status(port, b"POST /echo HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        small = b'{"a": 1}'
        fits = await _status(port, b"POST /echo HTTP/1.1\r\nHost: g\r\nContent-Length: %d\r\n\r\n%s" % (len(small), small))
        await _stop(server, task)
        return declared, streamed, fits

    assert asyncio.run(main()) == (413, 413, 200)


def test_a_connection_flood_is_answered_503_and_the_gateway_serves_again_after_it():
    async def main():
        server, task, port = await _served(max_connections=4)
        flood = [await asyncio.open_connection("127.0.0.1", port) for _ in range(12)]
        statuses = []
        for reader, writer in flood:
            writer.write(b"GET /ok HTTP/1.1\r\nHost: g\r\n\r\n")
            await writer.drain()
            statuses.append(int((await asyncio.wait_for(reader.readline(), 10)).split()[1]))
        for _, writer in flood:
            writer.close()
        await asyncio.sleep(0.5)  # the server sees them closed
        after = await _status(port, b"GET /ok HTTP/1.1\r\nHost: g\r\n\r\n")
        await _stop(server, task)
        return statuses, after

    statuses, after = asyncio.run(main())
    assert statuses.count(503) >= 12 - 4 and set(statuses) <= {200, 503}
    assert after == 200
