"""The `hlo-tools` commands: each parses its arguments, calls hlo_tools.ops and writes
the output; no logic of its own, and no command imports another.

Each command module has main(argv) (argv[0] is the program name). Bad input is raised
(InputError, or an OSError): hlo_tools.cli.run, the one error wrapper, turns it into
one line on stderr and exit status 2.
"""
