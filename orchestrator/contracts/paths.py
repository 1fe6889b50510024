"""Config fields that name files, marked where they are declared so that a config file's relative
paths are read from that file's folder (orchestrator/config/relative_paths.py).

    model: str | None = Field(None, description=..., json_schema_extra=PATH)
"""

# A file or folder; the same field may also hold a name that is no path (a hub id, 'builtin:NAME').
PATH = {"relative_path": "path"}
# A function spec: 'path/file.py:name' is a file; 'package.module:name' and 'builtin:NAME' are not.
SPEC = {"relative_path": "spec"}
