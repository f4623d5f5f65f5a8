"""Sub-commands of the ``ringscope`` command line. Each module has ``add_arguments(parser)`` and ``run(args)``."""
