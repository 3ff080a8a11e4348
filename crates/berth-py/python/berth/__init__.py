"""berth from Python: WSGI and ASGI applications on berth's HTTP engine (``python -m berth``,
``berth-py``, ``berth.run``), berth's message engine (``berth.Core``) and FI-ASockIOCore's
API on it (``berth.fi``). The engine is Rust; Python runs on threads that hold the GIL only
while Python runs."""

from typing import Any, Union

from ._berth import Core, __version__

__all__ = ["Core", "run", "__version__"]


def run(app: Union[str, Any], host: str = "127.0.0.1", port: int = 8000, **options: Any) -> int:
    """Serves ``app`` (the application, or ``"module:attr"``) until SIGTERM or SIGINT, as
    ``uvicorn.run`` does; returns the exit code (0 after a clean drain). ``options`` are
    ``python -m berth``'s, spelled as keywords (``workers=2``, ``interface="asgi"``,
    ``proxy_headers=True``, ``header=["X-A:1"]``, ``max_body=None`` for no limit ...); an
    unknown or bad one is a ``TypeError`` or ``ValueError`` before anything starts.
    ``reload=True`` (with ``"module:attr"``) restarts the server when a file changes, as
    ``uvicorn.run("main:app", reload=True)`` does."""
    import argparse

    from . import __main__ as cli

    known = cli.defaults()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError("berth.run() got unknown options: {} (known: {})".format(
            ", ".join(unknown), ", ".join(sorted(known))))
    if options.get("reload") and not isinstance(app, str):
        raise ValueError("reload=True needs the application as an import string, "
                         "berth.run(\"main:app\", reload=True), as uvicorn's: the server "
                         "restarts by importing it again")
    args = argparse.Namespace(**{**known, **options})
    args.host, args.port = host, port
    # --reload runs `python -m berth` again in a child: the same options, as a command line.
    args.argv = cli.command_line(app, host, port, options) if options.get("reload") else None
    args.app = app if isinstance(app, str) else None
    ap = cli.parser()

    def refuse(message):
        raise ValueError(message)
    ap.error = refuse  # type: ignore[method-assign]
    if not 0 <= int(port) <= 65535:
        raise ValueError("port {} is not between 0 and 65535".format(port))
    cli.check_usage(ap, args)
    return cli.serve(args, None if isinstance(app, str) else app)
