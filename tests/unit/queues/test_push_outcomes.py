"""What a delivery's answer means for its task, the signature scheme, the address rules and URLs: no network."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import socket
import ssl
from datetime import UTC, datetime

import pytest

from queues.push import outcomes, signing, targets
from queues.push.connections import ConnectionFailed, ConnectionPool, Origin, Target
from queues.push.delivery import Answer, Delivery, request_headers
from taskforge_client.push import signature_problem, verify_signature


def answered(status: int, body: bytes = b"", **headers: str) -> Answer:
    return Answer("answered", 0.1, status=status, headers={k.lower().replace("_", "-"): v for k, v in headers.items()},
                  body=body)  # fmt: skip


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_any_2xx_succeeds(status: int) -> None:
    assert outcomes.outcome(answered(status, b'{"a": 1}')) == outcomes.Succeeded({"a": 1})


@pytest.mark.parametrize(
    "body", [b"", b"[]", b"null", b"{", b'{"a": NaN}', b'{"a": "\\u0000"}', b"\xff", b'{"a": "\\ud800"}']
)
def test_a_2xx_body_that_is_no_storable_object_is_no_result(body: bytes) -> None:
    assert outcomes.outcome(answered(200, body)) == outcomes.Succeeded(None)


def test_a_truncated_body_is_no_result() -> None:
    answer = Answer("answered", 0.1, status=200, body=b'{"a": 1}', truncated=True)
    assert outcomes.outcome(answer) == outcomes.Succeeded(None)


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_with_retry_after_retry_after_it(status: int) -> None:
    assert outcomes.outcome(answered(status, b"busy", retry_after="7")) == outcomes.Failed(f"HTTP {status}: busy", 7)
    assert outcomes.outcome(answered(status, retry_after="999999")).retry_after_seconds == 86_400  # type: ignore[union-attr]
    assert outcomes.outcome(answered(status)) == outcomes.Failed(f"HTTP {status}")
    assert outcomes.outcome(answered(status, retry_after="soon")) == outcomes.Failed(f"HTTP {status}")


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 5, 20, 12, 0, 0, tzinfo=UTC)
    assert outcomes.retry_after_seconds("Wed, 20 May 2026 12:00:30 GMT", now) == 30
    assert outcomes.retry_after_seconds("Wed, 20 May 2026 11:00:00 GMT", now) == 0


def test_retry_after_is_ignored_on_other_statuses() -> None:
    assert outcomes.outcome(answered(500, retry_after="5")) == outcomes.Failed("HTTP 500")


def test_last_error_quotes_200_bytes_without_nul() -> None:
    failed = outcomes.outcome(answered(500, b"\x00" + b"x" * 500))
    assert isinstance(failed, outcomes.Failed)
    assert failed.error == "HTTP 500: \ufffd" + "x" * 199


def test_a_redirect_fails_naming_where_it_pointed() -> None:
    failed = outcomes.outcome(answered(301, location="https://elsewhere.example/"))
    assert failed == outcomes.Failed("HTTP 301 (redirect to 'https://elsewhere.example/', not followed)")


@pytest.mark.parametrize(("answer", "label"), [
    (answered(204), "2xx"), (answered(302), "3xx"), (answered(404), "4xx"), (answered(503), "5xx"),
    (Answer("timeout", 1.0, error="timed out after 1 s"), "timeout"),
    (Answer("connection_error", 1.0, error="connection error: x"), "connection_error"),
    (Answer("refused", 0.0, error="refused: x"), "refused"),
])  # fmt: skip
def test_metric_labels(answer: Answer, label: str) -> None:
    assert outcomes.metric_label(answer) == label


def test_failures_without_an_answer_keep_their_error() -> None:
    assert outcomes.outcome(Answer("timeout", 1.0, error="timed out after 3 s")) == outcomes.Failed(
        "timed out after 3 s"
    )


# --- signatures ---------------------------------------------------------------------------------


def test_the_signature_is_hmac_sha256_over_timestamp_task_id_and_body() -> None:
    expected = hmac.new(b"k", b"1700000000.t-1.{}", hashlib.sha256).hexdigest()
    assert signing.signature("k", 1700000000, "t-1", b"{}") == expected
    assert signing.signature_header(["new", "old"], 1, "t", b"b") == (
        f"v1={signing.signature('new', 1, 't', b'b')},v1={signing.signature('old', 1, 't', b'b')}"
    )


def test_request_headers_are_the_contracts_and_verify_with_the_client() -> None:
    delivery = Delivery("t-1", "q", 2, None, {"a": 1}, "https://x.example/", 30, {"X-Extra": "1"}, ["s1", "s0"])
    headers = {k.decode(): v.decode() for k, v in request_headers(delivery, b'{"a":1}', 1_700_000_000)}
    assert headers["Content-Type"] == "application/json" and headers["X-Extra"] == "1"
    assert (headers["TaskForge-Task-Id"], headers["TaskForge-Queue"], headers["TaskForge-Attempt"]) == ("t-1", "q", "2")
    assert "TaskForge-Kind" not in headers and headers["TaskForge-Timestamp"] == "1700000000"
    for secret in ("s1", "s0"):
        assert signature_problem(headers, b'{"a":1}', [secret], now=1_700_000_100) is None
    assert (
        signature_problem(headers, b'{"a":1}', ["other"], now=1_700_000_100) == "no v1 signature matches a known secret"
    )
    assert "replay" in (signature_problem(headers, b'{"a":1}', "s1", now=1_700_000_301) or "")
    assert not verify_signature({}, b"", "s1")


# --- addresses ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"),
    ("10.0.0.1", "private"), ("172.31.0.1", "private"), ("192.168.1.1", "private"), ("fd00::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("240.0.0.1", "private"), ("100.64.0.1", "not globally routable"), ("93.184.216.34", None),
    ("2606:2800:220:1:248:1893:25c8:1946", None),
])  # fmt: skip
def test_which_addresses_are_refused(address: str, reason: str | None) -> None:
    got = targets.refusal(ipaddress.ip_address(address))
    assert (got is None) == (reason is None), got


def _resolving_to(*addresses: str):  # type: ignore[no-untyped-def]
    async def getaddrinfo(host, port, **options):  # type: ignore[no-untyped-def]
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses
        ]

    return getaddrinfo


def _post(monkeypatch: pytest.MonkeyPatch, asked: list[str], *addresses: str) -> None:
    """POST through the pusher's pool to a name resolving to ``addresses``; the network stands in:
    ``asked`` gets the address each connection was asked for, and the connection is refused."""

    async def create_connection(factory, host, port, **options):  # type: ignore[no-untyped-def]
        asked.append(host)
        raise ConnectionRefusedError(111, "refused by the stand-in network")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(loop, "getaddrinfo", _resolving_to(*addresses))
        monkeypatch.setattr(loop, "create_connection", create_connection)
        pool = ConnectionPool(max_connections=1, allow_private=False, ssl_context=ssl.create_default_context())
        with contextlib.suppress(ConnectionFailed):
            await pool.post(Target.of("https://hooks.example.com/hook"), [], b"{}", 100)

    asyncio.run(run())


def test_the_connection_goes_to_the_address_that_was_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    # The name's answer lists a private address first: the public one is used, by address, so a
    # second lookup at connect time (DNS rebinding) never happens.
    _post(monkeypatch, asked, "10.0.0.7", "93.184.216.34")
    assert asked == ["93.184.216.34"]
    with pytest.raises(targets.TargetRefused, match=r"127\.0\.0\.1 \(loopback\), 10\.0\.0\.7 \(private\)"):
        _post(monkeypatch, asked, "127.0.0.1", "10.0.0.7")
    assert asked == ["93.184.216.34"], "no connection to a refused address"


def test_a_url_is_taken_apart_into_origin_request_target_and_host_header() -> None:
    target = Target.of("https://Hooks.Example.com:8443/a/b?x=1&y=2")
    assert (target.origin, target.target, target.host_header) == (
        Origin("https", "hooks.example.com", 8443),
        b"/a/b?x=1&y=2",
        b"hooks.example.com:8443",
    )
    assert Target.of("http://[::1]/").host_header == b"[::1]"
    assert Target.of("http://h.example").target == b"/"
    with pytest.raises(ConnectionFailed, match="unsupported URL scheme"):
        Target.of("ftp://h.example/")


def test_a_queues_own_user_agent_replaces_the_default_instead_of_doubling_it() -> None:
    delivery = Delivery("t", "q", 1, "k.x", {}, "https://x.example/", 30, {"user-agent": "mine"}, ["s"])
    names = [name.decode().lower() for name, _ in request_headers(delivery, b"{}", 1)]
    assert names.count("user-agent") == 1 and names.count("accept-encoding") == 1
    assert dict((k.decode(), v.decode()) for k, v in request_headers(delivery, b"{}", 1))["TaskForge-Kind"] == "k.x"
