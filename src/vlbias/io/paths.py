"""The one rule for a path that comes from data (a manifest row, a stimulus file, a published table's
``path`` column, an upstream listing): it names a file inside a folder the project chose, never
another one.

    dest = confined(cache, row["path"], source=f"{manifest}: line {n}")   # cache / row["path"], checked

A path from data is relative, has no ``..`` component, no control character (NUL, newline, tab, ...),
no backslash (a separator elsewhere, a file name character here: ambiguous either way) and no name
longer than NAME_MAX bytes, and, resolved with its symbolic links, stays inside its root. Anything
else is an InputError naming the source and the path.
"""

import os
import re
from pathlib import Path, PurePosixPath
from typing import TypeAlias

from vlbias.errors import InputError

StrPath: TypeAlias = str | os.PathLike[str]
"""A file system path, as ``open`` and ``Path`` take it."""

# bytes in one file name: file systems allow 255, and a writer's temporary name (vlbias.io.atomic) adds ~15
NAME_MAX = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # C0 controls and DEL


def relative_path(relative: StrPath, source: object) -> PurePosixPath:
    """``relative`` as a PurePosixPath if it obeys the rule (the part that needs no root), else InputError."""
    text = str(relative)
    path = PurePosixPath(text)  # parsed once: a manifest of 12,000 rows checks 50,000 paths
    why = None
    if not text:
        why = "an empty path"
    elif bad := _CONTROL.search(text):
        why = f"a control character ({bad.group()!r}) in the path"
    elif "\\" in text:
        why = "a backslash in the path"
    elif path.is_absolute():
        why = "an absolute path"
    elif ".." in path.parts:
        why = "a '..' component"
    elif not path.parts:
        why = "no file name"
    elif any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX for part in path.parts):
        why = f"a name longer than {NAME_MAX} bytes"
    if why:
        raise InputError(source, f"{why} {text!r}: a path from data must be relative to its folder, without "
                                 "'..' or control characters")
    return path


def confined(root: StrPath, relative: StrPath, source: object) -> Path:
    """``root / relative``, after checking that ``relative`` obeys the rule and that the file it names
    (its symbolic links followed, whether or not it exists yet) lies inside ``root``."""
    path = Path(root) / relative_path(relative, source)
    if not path.resolve().is_relative_to(Path(root).resolve()):
        raise InputError(source, f"'{relative}' leads outside {root} (through a symbolic link)")
    return path
