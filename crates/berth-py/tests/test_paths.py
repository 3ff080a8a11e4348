"""The request path as the application sees it, over real sockets: %XX decoded (WSGI's
PATH_INFO as latin-1 characters, ASGI's path as UTF-8), a ``%`` not followed by two hex digits
kept as it is, and the query string left raw."""

import pytest

import helpers

APPS = {
    "asgi": ("apps.asgi_apps:path", "--interface", "asgi"),
    "wsgi": ("apps.wsgi_apps:path", "--interface", "wsgi"),
}


@pytest.fixture(params=sorted(APPS))
def server(request):
    proc, port, _ = helpers.start(*APPS[request.param])
    yield request.param, port
    helpers.stop(proc)


def test_percent_escapes_are_decoded_and_others_kept(server):
    kind, port = server
    r, body = helpers.request(port, "GET", "/a%20b/%41%2f%zz%4/%?x=%20y")
    assert r.status == 200
    path, query = body.split(b"\n")
    assert path == b"/a b/A/%zz%4/%", (kind, body)
    assert query == b"x=%20y", (kind, body)


def test_escaped_utf8_is_one_character_in_asgi_and_its_bytes_in_wsgi(server):
    kind, port = server
    r, body = helpers.request(port, "GET", "/caf%C3%A9")
    assert r.status == 200
    # Both carry the same bytes: WSGI as two latin-1 characters, ASGI as one é in UTF-8.
    assert body.split(b"\n")[0] == b"/caf\xc3\xa9", (kind, body)
