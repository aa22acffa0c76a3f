"""Guidance: keeping a long-running agent on track without touching the cached prefix.

* :mod:`.recitation` — ``FOCUS``: goal, step and open items re-stated at the end of the tail, more often as
  the session grows or when recent actions drift from the goal;
* :mod:`.failures` — ``FAILURES``: classified failed actions, repeats, patterns and cascades;
* :mod:`.repair` — JSON repair of tool-call arguments against the tool's schema, each repair logged.

Everything here lives in the dynamic tail or in the log; none of it changes a byte before the last cache
breakpoint. :func:`guided_layers` is the default layer set plus the guidance layers.
"""

from __future__ import annotations

from ..layers.base import Layer
from ..layers.builtin import default_layers
from .failures import CATEGORIES, FailuresLayer, FailureTracker, classify
from .recitation import RecitationLayer
from .repair import ArgumentRepair, repair_arguments


def guided_layers(low_water: float = 0.7, *, failures: bool = True, recitation: bool = True) -> list[Layer]:
    """The default layers plus the failure evidence and recitation layers (``Engine(layers=guided_layers)``)."""
    layers = default_layers(low_water)
    if failures:
        layers.append(FailuresLayer())
    if recitation:
        layers.append(RecitationLayer())
    return layers


__all__ = ["CATEGORIES", "ArgumentRepair", "FailureTracker", "FailuresLayer", "RecitationLayer", "classify",
           "guided_layers", "repair_arguments"]
