"""The exit statuses of every mlxchat command."""

EXIT_FAILURE = 1  # something stopped the command (a model that does not load, a database that cannot be read)
EXIT_USAGE = 2  # bad flags or settings, or a model the engine refuses: as argparse itself exits
