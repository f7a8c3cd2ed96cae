"""Compatibility import: the module lives in hlo_tools.model.collectives."""

from hlo_tools.model.collectives import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import
from hlo_tools.model.collectives import operand_users, trip_count  # noqa: F401
