"""The smallest ASGI application, for the README's first command:
``python -m berth hello:app --app-dir crates/berth-py/examples`` (then
``curl http://127.0.0.1:8000/``). A FastAPI, Starlette, Django or Flask application is served
the same way: ``python -m berth MODULE:APP``."""


async def app(scope, receive, send):
    if scope["type"] != "http":
        return  # lifespan and websocket: nothing to do here
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"Hello from berth\n"})
