"""Renderers: how generated kernels are spelled per target language.

`CStyleLanguage` (cstyle.py) holds what C-like languages share; `CLanguage` (c.py) is the
CPU's C, and `C` its instance, through which the CPU backend renders every kernel.
"""
from .c import C, CLanguage
from .cstyle import CStyleLanguage

__all__ = ["C", "CLanguage", "CStyleLanguage"]
