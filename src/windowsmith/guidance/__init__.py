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
from .variation import TAIL_STYLES, TailStyle, VariationLayer, compact_json


def guided_layers(low_water: float = 0.7, *, failures: bool = True, recitation: bool = True,
                  variation: bool = False) -> list[Layer]:
    """The default layers plus the failure evidence and recitation layers (``Engine(layers=guided_layers)``);
    ``variation=True`` also rotates the tail's format and the guidance phrasing turn by turn."""
    layers = default_layers(low_water)
    if failures:
        layers.append(FailuresLayer(vary=variation))
    if recitation:
        layers.append(RecitationLayer(vary=variation))
    if variation:
        layers.append(VariationLayer())
    return layers


__all__ = ["CATEGORIES", "TAIL_STYLES", "ArgumentRepair", "FailureTracker", "FailuresLayer", "RecitationLayer",
           "TailStyle", "VariationLayer", "classify", "compact_json", "guided_layers", "repair_arguments"]
