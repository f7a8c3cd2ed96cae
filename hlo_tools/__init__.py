"""hlo_tools: read, dump, diff, verify and explain XLA HLO around the NVSHMEM pass."""

__version__ = "0.1.0"
