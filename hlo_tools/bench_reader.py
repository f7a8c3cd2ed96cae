"""Compatibility import: the module lives in hlo_tools.commands.bench.reader."""

from hlo_tools.commands.bench.reader import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import
from hlo_tools.commands.bench.reader import bench_parse  # noqa: F401
