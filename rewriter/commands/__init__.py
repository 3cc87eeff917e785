"""One module per ``rewrite`` subcommand: ``HELP``, ``add_arguments(parser)``, ``run(args, ui)``."""
