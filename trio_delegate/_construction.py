"""Handles that users receive but must not build themselves."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["NoPublicConstructor"]

T = TypeVar("T")


class NoPublicConstructor(type):
    """Metaclass that hides a class's constructor behind ``_create``.

    ``Parent(...)`` raises ``TypeError``; the runtime builds one with
    ``Parent._create(...)``.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; "
            "get one from trio_delegate.open_runtime() or Runtime.open_parent()"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
