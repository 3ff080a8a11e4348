"""berth from Python: berth's message engine (``berth.Core``) and FI-ASockIOCore's API on it
(``berth.fi``). The engine is Rust; Python runs on one thread that holds the GIL, and the
engine gives the GIL back for the whole of each I/O round."""

from ._berth import Core

__all__ = ["Core"]
