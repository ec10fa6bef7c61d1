"""``python -m trio_delegate``: the ``trio-delegate`` command."""

from ._cli._main import main

if __name__ == "__main__":
    raise SystemExit(main())
