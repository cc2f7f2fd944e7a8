"""Where a server is and what may be shown of it (mars/engines/endpoint.py): one URL check for
the command line, the server backend and the workflow's config check; credentials in a URL and
the API key never shown; a server's text printable only."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mars.engines.endpoint import api_key, check_base_url, printable, redact
from mars.errors import MarsError

httpx = pytest.importorskip("httpx")

BAD_URLS = [
    ("http://127.0.0.1:99999", "port out of range"),
    ("http://[::1", "invalid ipv6 url"),
    ("http://127.0.0.1:abc", "port could not be cast"),
    ("http://127.0.0.1:0", "port 0 is not in 1..65535"),
    ("http://[zz]:80", "ipv6 address"),
    ("http://1.2.3.999:80", "not an IPv4 address"),
    ("http://a b:80", "a space"),
    ("http://hôst:80", "non-ASCII"),
    ("ftp://h:21", "not an http(s) URL"),
    ("http://:80", "no host"),
    ("http://h:80/x?y=1", "a query"),
    ("localhost:8080", "not an http(s) URL"),
    ("", "empty"),
]


@pytest.mark.parametrize(("url", "why"), BAD_URLS)
def test_a_url_no_client_could_use_is_one_line(url, why):
    with pytest.raises(MarsError) as exc:
        check_base_url(url)
    msg = str(exc.value)
    assert msg.startswith("--base-url ") and why in msg and "\n" not in msg
    assert msg.endswith("expected http://HOST:PORT")


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://gpu-node:8000/v1/", "http://gpu-node:8000"),
        ("https://[::1]:443/", "https://[::1]:443"),
        ("http://u:p@h.example.org/proxy", "http://u:p@h.example.org/proxy"),
        ("http://localhost", "http://localhost"),
    ],
)
def test_a_good_url_is_kept_less_a_trailing_v1(url, normal):
    assert check_base_url(url) == normal


def test_credentials_in_a_refused_url_are_not_shown():
    with pytest.raises(MarsError) as exc:
        check_base_url("http://user:s3cret@h:99999", "models.m.base_url")
    assert "s3cret" not in str(exc.value) and "***@h:99999" in str(exc.value)
    assert str(exc.value).startswith("models.m.base_url ")


@given(st.text(max_size=60))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_text_is_refused_in_one_line_or_a_url_httpx_takes(text):
    for url in (text, "http://" + text, "http://h:" + text, "http://u:pw@" + text):
        try:
            u = check_base_url(url)
        except MarsError as exc:
            msg = str(exc)
            assert "\n" not in msg and msg == printable(msg, 10_000)
            assert "u:pw@" not in msg
            continue
        httpx.AsyncClient(base_url=u)  # no InvalidURL
        assert httpx.URL(u).host


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("s3cret\nline2", "a line break"),
        ("s3cret line2", "a space"),
        ("s3cr\x1bet", "a control character"),
        ("clé-s3cret", "a non-ASCII character"),
    ],
)
def test_a_key_a_header_cannot_carry_is_one_line_without_the_key(monkeypatch, key, what):
    monkeypatch.setenv("MY_KEY", key)
    with pytest.raises(MarsError) as exc:
        api_key("MY_KEY")
    msg = str(exc.value)
    assert msg.startswith("$MY_KEY: the API key holds " + what) and "\n" not in msg
    assert "s3cr" not in msg and "line2" not in msg


def test_a_key_read_from_a_file_loses_its_final_newline(monkeypatch):
    monkeypatch.setenv("MY_KEY", "  s3cret\n")
    assert api_key("MY_KEY") == "s3cret"
    monkeypatch.delenv("MY_KEY")
    assert api_key("MY_KEY") == "" and api_key(None) == ""


def test_redact_hides_every_url_s_credentials():
    text = "at http://u:p@a:1/x and https://tok@b then http://c:2, 'al:pw@h:80'"
    assert redact(text) == "at http://***@a:1/x and https://***@b then http://c:2, '***@h:80'"
    assert redact("mail me at a@b.org, at 10:30@home") == "mail me at a@b.org, at ***@home"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("bad \x1b[2J\x1b[31mred\x1b[0m", "bad red"),
        ("title \x1b]0;pwned\x07after", "title after"),
        ("osc \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ end", "osc link end"),
        ("bidi \u202egnp.exe\u202c ok", "bidi gnp.exe ok"),
        ("c1 \x9b31mx", "c1 x"),
        ("lines\r\nand\ttabs\x00nul", "lines and tabsnul"),
        ("kept: ≤ — naïve 中文 é", "kept: ≤ — naïve 中文 é"),
    ],
)
def test_printable_removes_escapes_and_controls_keeps_text(raw, shown):
    assert printable(raw) == shown


@given(st.text())
def test_printable_never_lets_a_control_character_through(text):
    import unicodedata

    out = printable(text)
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") for c in out)
    assert "\x1b" not in out and len(out) <= 200
