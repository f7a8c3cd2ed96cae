"""Compatibility import: the module lives in hlo_tools.commands.heuristics.io."""

from hlo_tools.commands.heuristics.io import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import
from hlo_tools.commands.heuristics.io import HeuristicsError  # noqa: F401
