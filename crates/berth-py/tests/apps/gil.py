"""What the serving process says of the GIL, as a WSGI app (``wsgi``) and an ASGI app
(``asgi``), with no framework (a free-threaded interpreter's venv needs only berth): whether the
GIL is enabled now (``sys._is_gil_enabled()``, 3.13 and up; always before) and whether the
interpreter is a free-threaded build, as JSON (issue 33). Importing an extension module that
does not declare itself free-threading safe turns the GIL back on."""

import json
import sys
import sysconfig


def state() -> bytes:
    return json.dumps({
        "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    }).encode()


def wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/json")])
    return [state()]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": state()})
