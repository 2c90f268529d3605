"""The ``explorer`` command: one module per verb, each with ``add_parser`` and ``run``."""
