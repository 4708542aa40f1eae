"""Memory layouts: ``kiln.strided`` (every dense Tensor) and ``kiln.sparse_coo``."""
from __future__ import annotations


class Layout:
    """How a tensor stores its elements; compare with ``is``/``==`` against the two instances.

    >>> kiln.ones(2).layout is kiln.strided
    True
    """

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"kiln.{self.name}"

    def __reduce__(self) -> str:
        return self.name  # pickles and copies as the module-level instance


strided = Layout("strided")
sparse_coo = Layout("sparse_coo")
