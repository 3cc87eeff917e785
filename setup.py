"""Package layout that pyproject.toml cannot say: ``op_tables/`` (top level, as the design names
it) is shipped inside the wheel as the ``rewriter.op_tables`` package, so installed code finds the
tables with ``importlib.resources`` exactly as an editable checkout does."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rewriter", "rewriter.*"]), "rewriter.op_tables"],
    package_dir={"rewriter.op_tables": "op_tables"},
)
