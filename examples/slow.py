"""An example command subagent that takes its time.

The task is text naming a number of seconds to work, such as ``3`` (default 5):
the tools' ``task`` is always a string. It reports progress on
stderr and its result on stdout. Cancelling the run ends it with SIGTERM.
"""

import os
import sys
import time


def main() -> None:
    text = sys.stdin.read().strip()
    try:
        seconds = float(text) if text else 5.0
    except ValueError:
        print(f"the task must be a number of seconds, got {text!r}", file=sys.stderr)
        sys.exit(2)
    run_id = os.environ.get("TRIO_DELEGATE_RUN_ID", "?")
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        print(f"{run_id}: {elapsed:.0f} of {seconds:g} s", file=sys.stderr, flush=True)
        time.sleep(min(1.0, seconds - elapsed))
    print(f"worked for {seconds:g} s")


if __name__ == "__main__":
    main()
