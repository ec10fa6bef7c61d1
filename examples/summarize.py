"""An example command subagent: summarizes the text it reads on stdin.

It writes one JSON object, {"summary": ..., "words": ...}, to stdout: the
subagent has a final_schema, so its stdout is parsed as JSON.
"""

import json
import re
import sys


def main() -> None:
    text = sys.stdin.read()
    words = text.split()
    if not words:
        print("there is nothing to summarize: the task was empty", file=sys.stderr)
        sys.exit(1)
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(words))
    summary = sentences[0] if len(sentences[0]) <= 300 else sentences[0][:299] + "…"
    json.dump({"summary": summary, "words": len(words)}, sys.stdout)


if __name__ == "__main__":
    main()
