"""A session: one agent conversation, an append-only log plus the state folded from it.

:class:`Session` is a thin facade over small collaborators it owns (see :mod:`windowsmith.session.facade`);
:meth:`Session.load` returns a :class:`LoadResult`. Open one with ``Engine.session(id)``.
"""

from __future__ import annotations

from .facade import Session
from .load import LoadResult

__all__ = ["LoadResult", "Session"]
