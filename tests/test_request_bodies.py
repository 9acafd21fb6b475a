"""Request bodies go on the wire as the bytes recorded: read from a session log, kept in
the trace's binary ``body`` column, sent by both engines, received by a recording
server byte for byte."""

from __future__ import annotations

import socket

from shrink.testbed.fake import FakeServer


def test_the_fake_server_reads_a_request_body_past_and_records_it():
    # A body that looks like a request: read as the next head, it was answered as one.
    body = b"GET /smuggled HTTP/1.1\r\n\r\n\x00\xff"
    post = b"POST /p HTTP/1.1\r\nHost: h\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    with FakeServer() as fake:
        # the body in two parts: the server waits for the rest before it answers
        with socket.create_connection(("127.0.0.1", fake.port), timeout=5) as s:
            s.sendall(post[:-5])
            s.sendall(post[-5:] + b"GET /q HTTP/1.1\r\nHost: h\r\n\r\n")
            got = b""
            while got.count(b"HTTP/1.1 200") < 2 or not got.endswith(b"x" * 100):
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
        assert fake.paths == ["/p", "/q"]
        assert fake.bodies == [body, b""]
