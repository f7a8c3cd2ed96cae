"""The `hlo-tools` commands: thin layers over hlo_tools.model.

Each command module has main(argv) (argv[0] is the program name) built on
commands.common.run_command, which turns every kind of bad input into one line
on stderr and exit status 2.
"""
