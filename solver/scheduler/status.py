"""A cell's status, on its own so a solver process running cells imports only this (not every
answer of the scheduler queries)."""

from __future__ import annotations

from enum import Enum


class CellStatus(str, Enum):
    """What became of one (GPU type, count) cell."""

    PLANNED = "PLANNED"  # a layout fits
    DOES_NOT_FIT = "DOES_NOT_FIT"  # every layout overflows memory
    COUNT_NOT_USABLE = "COUNT_NOT_USABLE"  # no layout of this count obeys the rules and the batch
    UNSOLVED = "UNSOLVED"  # no layout found within the cell's time limit
