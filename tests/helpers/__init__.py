"""Helpers shared by the tests (never imported from a ``test_*`` module)."""
