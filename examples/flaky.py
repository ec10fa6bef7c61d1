"""An example command subagent that fails now and then.

It fails with probability FLAKY_FAILURE_RATE (default 0.5), or always when
the task contains "[fail]" and never when it contains "[ok]". A failure is a
non-zero exit: the run fails with the exit code and the end of stderr.
"""

import os
import random
import sys


def main() -> None:
    task = sys.stdin.read()
    rate = float(os.environ.get("FLAKY_FAILURE_RATE", "0.5"))
    fails = "[fail]" in task or ("[ok]" not in task and random.random() < rate)
    if fails:
        print("flaky: the check could not be completed (a transient failure)", file=sys.stderr)
        sys.exit(3)
    print(f"checked: {task.strip()[:200]}")


if __name__ == "__main__":
    main()
