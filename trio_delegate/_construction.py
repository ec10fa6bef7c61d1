"""Handles that users receive but must not build themselves."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["NoPublicConstructor"]

T = TypeVar("T")


class NoPublicConstructor(type):
    """Metaclass that hides a class's constructor behind ``_create``.

    ``Parent(...)`` raises ``TypeError`` naming where a parent comes from
    (the class's ``_made_by``); the runtime builds one with
    ``Parent._create(...)``.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        made_by = getattr(cls, "_made_by", "trio_delegate.open_runtime()")
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; get one from {made_by}"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
