"""Which of PyTorch's public names kiln has: a generated table, by area, ranked by use.

See docs/api-coverage.md (generated) and ``python -m kiln.api_coverage --help``.
"""
from .areas import AREAS, REFUSED, Area
from .table import build, load, render_counts, render_page

__all__ = ["AREAS", "REFUSED", "Area", "build", "load", "render_counts", "render_page"]
