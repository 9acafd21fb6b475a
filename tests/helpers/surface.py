"""The public surface of a package, as httpx's ``tests/test_exported_members.py`` checks it."""

from __future__ import annotations

import types


def public_names(module: types.ModuleType) -> set[str]:
    """Every name a user can import from ``module`` that does not start with ``_``.

    Submodules are left out (they are reached by their dotted name), and so is
    ``annotations`` from ``from __future__ import annotations``. Names a module
    loads on first use (PEP 562 ``__getattr__``, listed by its ``__dir__``) count.
    """
    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and not isinstance(getattr(module, name), types.ModuleType)
        and name != "annotations"
    }


def exported(module: types.ModuleType) -> set[str]:
    """``__all__`` as a set, less the dunder names it may list (``__version__``)."""
    names = list(module.__all__)
    assert len(names) == len(set(names)), f"{module.__name__}.__all__ lists a name twice"
    return {n for n in names if not n.startswith("_")}
