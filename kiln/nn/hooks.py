"""`RemovableHandle`: what ``register_*_hook`` returns; ``handle.remove()`` unregisters the hook."""
from __future__ import annotations

import itertools
from typing import Any, Callable

_next_hook_id = itertools.count()


class RemovableHandle:
    """Removes one hook from the dict it was registered in; usable as a context manager.

    >>> handle = model.register_forward_hook(lambda m, args, out: print(out.shape))
    >>> handle.remove()
    """

    def __init__(self, hooks: dict[int, Callable], on_change: Callable[[], None] | None = None):
        self.id = next(_next_hook_id)
        self._hooks = hooks
        self._on_change = on_change

    def remove(self) -> None:
        """Unregister the hook; calling it twice is harmless."""
        if self._hooks.pop(self.id, None) is not None and self._on_change is not None:
            self._on_change()

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
