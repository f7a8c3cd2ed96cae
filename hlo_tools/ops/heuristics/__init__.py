"""Test and tune the backend-selection heuristic: sweep (modeled times of every plan),
check (the C++ pass against the core on real compiles), calibrate (a cost table from
measurements)."""

from hlo_tools.errors import HeuristicsError  # noqa: F401  (its home before errors.py)
