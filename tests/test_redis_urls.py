"""What a user gets for a Redis URL, a name or credentials that cannot work: one clear line
naming what was wrong, never a traceback, a secret, another server's data or a hang."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cli_helpers import assert_clean_error, invoke
from urlseen import ConfigError, kinds
from urlseen.errors import OptionError, RemoteError
from urlseen.shared import client as redis_store


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:6379/0?socket_timeout=-1", "socket_timeout is a number of seconds"),
        ("redis://127.0.0.1:6379/0?socket_connect_timeout=inf", "socket_connect_timeout"),
        ("redis://127.0.0.1:6379/0?ssl_cert_reqs=x", "needs a TLS connection"),
        ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=x", "none, optional or required"),
        ("redis://127.0.0.1:6379/0?max_connections=0", "positive whole number"),
        ("redis://127.0.0.1:6379/0?retry_on_timeout=maybe", "true or false"),
        ("redis://127.0.0.1:6379/0?sockettimeout=1", "unknown option 'sockettimeout'"),
        ("redis://127.0.0.1:0/0", "the port is a number from 1 to 65535, not 0"),
    ],
)
def test_url_options_redis_py_would_choke_on_are_refused_before_connecting(url, problem, tmp_path):
    with pytest.raises(ConfigError, match=problem):
        redis_store.connect(url)
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\n")
    error = assert_clean_error(invoke("dedup", "--redis", url, "--name", "crawl", src), 1)
    assert problem.split("'")[0] in error


def test_options_redis_py_takes_still_pass(redis_url):
    url = redis_url + "?socket_timeout=3&health_check_interval=0&client_name=urlseen-test"
    client = redis_store.connect(url)
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 3.0
    assert client.ping()


def test_a_url_without_timeouts_gets_bounded_ones(redis_url):
    kwargs = redis_store.connect(redis_url).connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == redis_store.SOCKET_TIMEOUT
    assert kwargs["socket_connect_timeout"] == redis_store.CONNECT_TIMEOUT


def test_wrong_credentials_are_named_as_such_at_once(redis_servers, tmp_path):
    locked = redis_servers(persist=False)
    locked.client().config_set("requirepass", "right-one")
    wrong = locked.url.replace("redis://", "redis://default:wrong-one@")
    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\n")
    started = time.monotonic()
    result = invoke("dedup", "--redis", wrong, "--name", "crawl", src)
    took = time.monotonic() - started
    error = assert_clean_error(result, 1)
    assert "refused the URL's credentials" in error and "unreachable" not in error
    assert "wrong-one" not in error
    assert took < 5, f"credentials refused after {took:.1f} s: they must not be retried"


def test_a_server_that_never_answers_fails_within_the_socket_timeout(tmp_path):
    """A port that accepts connections and never replies (a hung server, a wrong service)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        url = f"redis://127.0.0.1:{port}/0?socket_timeout=1"
        started = time.monotonic()
        with pytest.raises(RemoteError, match="unreachable"):
            kinds.open_filter("bloom", redis=url, name="crawl", capacity=1000)
        took = time.monotonic() - started
        assert took < redis_store.RETRY_SECONDS + 2, f"gave up after {took:.1f} s"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize("name", ["a\x85b", "a\u2028b", "a\x9fb", "a\tb"])
def test_names_with_any_control_or_line_separator_character_are_refused(name):
    with pytest.raises(ConfigError, match="control characters"):
        redis_store.check_name(name)


def test_a_missing_filter_is_reported_without_the_urls_password(redis_url):
    user_url = redis_url.replace("redis://", "redis://:not-a-real-password@")
    client = redis_store.connect(redis_url)
    if client.config_get("requirepass").get("requirepass"):
        pytest.skip("the test server has a password")
    with pytest.raises(OptionError, match="no urlseen filter named") as caught:
        kinds.describe(redis=user_url, name="urlseen-test-no-such-filter")
    assert "not-a-real-password" not in str(caught.value)
    assert ":***@" in str(caught.value)


@pytest.mark.parametrize(
    "query", ["socket_read_size=65536", "client_name=crawler-7", "retry_on_error=true"]
)
def test_options_known_to_redis_py_but_not_listed_here_still_pass(redis_url, query):
    client = redis_store.connect(f"{redis_url}?{query}")
    assert client.ping()
