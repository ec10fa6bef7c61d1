"""Public faces report their own path as each name's module, as trio's do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, MutableMapping
from typing import Any

__all__ = ["show_under"]


def show_under(module: str, namespace: MutableMapping[str, Any], names: Iterable[str]) -> None:
    """Make each of *names* in *namespace* report *module* as its ``__module__``.

    Reprs, tracebacks and documentation then name the public path
    (``trio_delegate.Parent``), not the private module a name is defined in.
    Names defined outside the package are left alone. An attrs class's
    string annotations are resolved first, where they can be: they are read
    in the module its ``__module__`` names (a hint named only for type
    checkers, such as ``Subagent``'s runner, stays a string).

    Args:
        module: the public module's name.
        namespace: its globals.
        names: its ``__all__``.
    """
    import attrs

    for name in names:
        value = namespace[name]
        defined_in = getattr(value, "__module__", None)
        if not (isinstance(defined_in, str) and defined_in.startswith("trio_delegate.")):
            continue
        if isinstance(value, type) and attrs.has(value):
            with contextlib.suppress(NameError):
                attrs.resolve_types(value)
        value.__module__ = module
