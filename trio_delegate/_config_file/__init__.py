"""The parts of ``trio-delegate serve``'s configuration file, one module per concept.

* ``_problems``: :class:`ConfigError`, and the :class:`Problem` a check raises;
* ``_reading``: the file read safely into TOML data;
* ``_values``: the checks that read one key's value;
* ``_sections``: the file's tables as attrs classes, one field per key;
* ``_structure``: the one converter that structures TOML data into them, and
  turns what it finds wrong into a :class:`ConfigError` naming the key;
* ``_resolve``: what needs the disk or an import (folders, programs, Python
  runners, the store's file).

``trio_delegate._server_config`` puts them together.
"""
