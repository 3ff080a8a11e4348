"""What the Python peers share: the routes' answers and HTTP/1.1 response framing. Each peer
differs only in how it runs connections, which is what the lab compares."""
import json

HELLO = b"Hello, World!"
SLOW_SECONDS = 0.03  # berth's /test/slow job takes 30 ms
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def respond(status, ctype, body, close):
    """A complete response with Content-Length (and Connection: close when closing)."""
    head = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n")
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def parse_head(head):
    """(method, path, version, headers) from a request head without its final CRLF CRLF."""
    lines = head.decode("latin-1").split("\r\n")
    method, path, version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, path, version, headers


def wants_close(version, headers):
    return headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"


def route(method, path, body):
    """The answer to a request, or None for /test/slow, whose wait each peer does its own way."""
    if method == "GET" and path in ("/", "/hello/world"):
        return 200, "text/plain", HELLO
    if method == "GET" and path == "/test/slow":
        return None
    if method == "POST" and path == "/reverse":
        try:
            data = json.loads(body)
            rev = json.dumps({"data": [v[::-1] for v in data.values()]})
            return 200, "application/json", rev.encode()
        except (ValueError, AttributeError, TypeError):
            return 400, "text/plain", b"body must be a JSON object of strings\n"
    return 404, "text/plain", b"Endpoint not found"


SLOW_DONE = (200, "text/plain", b"")
