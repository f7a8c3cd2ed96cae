"""HLO text in: the tolerant reader (reader.py) of every module jax 0.9 to 0.11 writes,
refusing garbage with one line. The floor below hlo_tools.model; it imports nothing
of hlo_tools but bounded_input and errors.

The reader's parts, a job each: reader.py (the parser, parse_hlo_text / parse_hlo_file /
load_hlo_proto), grammar.py (opcode names, regexes), shape.py (Shape, the shape parser),
attributes.py (attribute values, replica groups), scanner.py (the exact one-line
scanner), ir.py (HloModule, HloComputation, HloInstruction).
"""
