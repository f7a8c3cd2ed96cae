"""HLO text in: the tolerant reader (reader.py) of every module jax 0.9 to 0.11 writes,
refusing garbage with one line. The floor below hlo_tools.model; it imports nothing
of hlo_tools but cli_io."""
