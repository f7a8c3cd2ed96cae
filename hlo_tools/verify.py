"""Compatibility import: the command lives in hlo_tools.commands.verify."""

from hlo_tools.commands.verify import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import
from hlo_tools.commands.verify import main, verify  # noqa: F401
