"""The package version and distribution name, in a module of their own so that any
module can import them."""

__version__ = "0.1.0"
# The name on the package index (pyproject.toml's project.name); the import package
# and the command stay "shrink". The index's "shrink" is an unrelated minifier.
DISTRIBUTION = "shrink-capacity"
