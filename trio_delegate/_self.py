"""How this installation's ``trio-delegate`` command is started, as a person would type it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

__all__ = ["installed_script", "shell_command"]

_NAME = "trio-delegate"


def installed_script() -> Path | None:
    """The ``trio-delegate`` script installed beside this Python, if there is one.

    An absolute path (not resolved: a virtual environment's ``python`` is a
    link to the base interpreter, and the script lives beside the link).
    """
    script = Path(sys.executable).absolute().parent / _NAME
    if script.is_file() and os.access(script, os.X_OK):
        return script
    return None


def shell_command(*args: str) -> str:
    """``trio-delegate ARGS`` as it runs from the current directory's shell.

    Plain ``trio-delegate`` when that name on ``PATH`` is this installation's
    script; else the script's path (relative when it is below the current
    directory, as ``.venv/bin/trio-delegate`` after ``make demo``); else
    ``python -m trio_delegate``.
    """
    script = installed_script()
    if script is None:
        program = [sys.executable, "-m", "trio_delegate"]
    else:
        on_path = shutil.which(_NAME)
        if on_path is not None and Path(on_path).absolute() == script:
            program = [_NAME]
        else:
            try:
                program = [str(script.relative_to(Path.cwd()))]
            except ValueError:
                program = [str(script)]
    return shlex.join([*program, *args])
