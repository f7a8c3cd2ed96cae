"""Compatibility import: the module lives in hlo_tools.commands.heuristics.shared."""

from hlo_tools.commands.heuristics.shared import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import
from hlo_tools.commands.heuristics.shared import HeuristicsError  # noqa: F401
