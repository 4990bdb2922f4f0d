"""What an operator reads when Temporal cannot be reached: the SDK's words and the causes in
the Rust core's Debug text, one line, never that text cut mid-struct."""

from __future__ import annotations

import socket

import pytest

from fleetctl.workflows.client import TemporalUnavailable, connect, sdk_error_line

# The Temporal Python SDK's (temporalio 1.35.0) RuntimeError texts from Client.connect,
# captured on the build machine: a closed port, a name that does not resolve, a plain HTTP
# server (python -m http.server) with and without TLS asked, and an HTTP proxy answering 404.
# The tonic part has the form of https://github.com/libp2p/punchr/issues/69 ("Error:
# tonic::transport::Error(Transport, hyper::Error(Connect, ConnectError("tcp connect error", Os {
# code: 111, kind: ConnectionRefused, message: "Connection refused" })))").
SAMPLES = [
    (
        'Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(ConnectError("tcp'
        ' connect error", 127.0.0.1:1, Os { code: 111, kind: ConnectionRefused, message: "Connection refused" })))',
        "Failed client connect: Server connection error: tcp connect error: Connection refused",
    ),
    (
        'Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(ConnectError("dns'
        ' error", Custom { kind: Uncategorized, error: "failed to lookup address information: Name or service not known"'
        " })))",
        "Failed client connect: Server connection error: dns error: failed to lookup address information: Name or service"
        " not known",
    ),
    (
        'Failed client connect: `get_system_info` call error after connection: Status { code: Internal, message: "h2'
        ' protocol error: http2 error", source: Some(tonic::transport::Error(Transport, hyper::Error(Http2, Error { kind:'
        ' GoAway(b"", FRAME_SIZE_ERROR, Library) }))) }',
        "Failed client connect: `get_system_info` call error after connection: Internal: h2 protocol error: http2 error",
    ),
    (
        "Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { kind:"
        " InvalidData, error: InvalidMessage(InvalidContentType) }))",
        "Failed client connect: Server connection error: InvalidMessage(InvalidContentType)",
    ),
    (
        "Failed client connect: `get_system_info` call error after connection: Status { code: Unimplemented, message:"
        ' "grpc-status header missing, mapped from HTTP status code 404", metadata: MetadataMap { headers: {"server":'
        ' "keryx", "date": "Sat, 05 Dec 2026 13:21:02 GMT"} }, source: None }',
        "Failed client connect: `get_system_info` call error after connection: Unimplemented: grpc-status header missing,"
        " mapped from HTTP status code 404",
    ),
    ("Namespace default is not found", "Namespace default is not found"),  # no Debug text: as it is
]


@pytest.mark.parametrize("text, line", SAMPLES)
def test_the_sdk_error_is_its_words_and_causes(text, line) -> None:
    assert sdk_error_line(text) == line


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_temporal_is_one_line_naming_the_refusal(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    settings.temporal_address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(TemporalUnavailable) as raised:
        await connect(settings)
    said = str(raised.value)
    assert "\n" not in said and "tonic::" not in said and "Os {" not in said, said
    assert f"cannot reach Temporal at {settings.temporal_address}" in said, said
    assert "tcp connect error: Connection refused" in said, said
