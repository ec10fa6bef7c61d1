"""``python -m trio_delegate.adapters``: print the capability matrix as Markdown.

``docs/adapters.md`` holds this output between its marker comments.
"""

from ._capabilities import render_markdown_table

print(render_markdown_table(), end="")
