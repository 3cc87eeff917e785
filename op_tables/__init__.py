"""The op tables, one TOML file per target (data, not code).

Installed as the package ``rewriter.op_tables`` (see ``setup.py``) so the wheel carries them and
:func:`rewriter.host.resources.op_tables_dir` finds them with :mod:`importlib.resources`.
"""
