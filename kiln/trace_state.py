"""`trace_state`: per thread, the active tracer (kiln.compile tracing) or djit recorder, if any.

A module of its own, importing nothing of kiln's, so that every layer can ask whether it is being
traced without importing the primitives (kiln/ops/primitive.py, whose `bind` is where ops meet it).
"""
from __future__ import annotations

import threading
from typing import Any


class _TraceState(threading.local):
    tracer: Any = None
    lazy: Any = None  # a djit call's LazyRecorder (kiln/jit/lazy.py): ops are recorded, not run


trace_state = _TraceState()
