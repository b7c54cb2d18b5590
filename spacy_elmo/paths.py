"""A ``~`` no shell expanded, in a path the user gave: one check for every command and loader.

A shell expands a leading ``~`` only where it starts a word and is not quoted: ``"~/out"`` and
``--heldout=~/x.txt`` reach spacy-elmo with the ``~`` in them, and Python (like a spaCy config) never
expands it. Read, such a path names nothing (the error says so); written, it would create a directory
named ``~`` in the current directory, so the commands refuse it as an output.

Also what else a path the user gave may mean by accident: the current directory, or one above it, that an
output would replace (:func:`holds_cwd`), and one file under two names, a hard link's real path another
(:func:`file_identity`), or one text in two files (:func:`file_sha256`).

And the one reader of a JSON file, the user's or spacy-elmo's own (:func:`read_json_file`).
"""

import errno
import hashlib
import json
import os
import reprlib
import shlex
from pathlib import Path
from typing import Any, BinaryIO, Optional, Sequence, Tuple, Union

from ._typing import PathLike
from .errors import Errors, listed


def shell_quoted(path: PathLike) -> str:
    """``path`` as one word of a shell command that a message suggests (``shlex.quote``): a path with spaces or
    quotes pastes as one argument (the message's prose names the plain path)."""
    return shlex.quote(os.fspath(path))


def python_quoted(path: PathLike) -> str:
    """``path`` as a Python string literal (``repr``) in code a message suggests (``spacy.load(...)``): a path with
    a quote or a backslash pastes as the same path, not a SyntaxError."""
    return repr(os.fspath(path))


def name_shown(name: PathLike) -> str:
    """A file name (or path) as a listing of a message shows it: plain, or as a Python string literal
    (:func:`python_quoted`) where it holds whitespace, a character that does not print (a newline), a comma or a
    quote, which would otherwise read as the listing's separators, or break its line."""
    text = os.fspath(name)
    if any(c.isspace() or not c.isprintable() or c in ",'\"" for c in text):
        return python_quoted(text)
    return text


def config_quoted(path: PathLike) -> str:
    """``path`` as a string value of a spaCy config (``source = ...``), whose values are read as JSON: a path with
    a double quote or a backslash reads back as the same path. The config interpolates first (``${section.key}``;
    ``$$`` is a ``$``): a lone ``$`` in the path is written ``$$`` (``/data/cost$5`` was an InterpolationSyntaxError),
    and a ``$`` before ``{`` as the JSON escape ``\\u0024``, since spaCy reads ``"$${x}"`` back as another value (the
    text ``${x}`` between quotes, taken for an interpolated string)."""
    text = json.dumps(os.fspath(path), ensure_ascii=False)
    return text.replace("${", "\\u0024{").replace("$", "$$")


def unexpanded_home(path: PathLike) -> Optional[str]:
    """What a shell would have made of ``path`` when its first component is a ``~`` (or ``~user``) that no
    shell expanded; None when it starts otherwise, or names no home directory (``~nosuchuser``).
    ``./~/x`` names a directory ``~`` on purpose: its first component is ``.``."""
    text = os.fspath(path)
    if not text.startswith("~"):
        return None
    expanded = os.path.expanduser(text)
    return expanded if expanded != text else None


def broken_link_error(link: PathLike, what: str = Errors.E_LINK_TO_FILE) -> FileNotFoundError:
    """The error of the symbolic link ``link`` whose target does not exist (``E_BROKEN_LINK``: where it points), or
    that leads round a loop of links (``E_LINK_LOOP``): a corpus file, an options.json, a model's file or directory.
    ``what``: what the link should point at (``Errors.E_LINK_TO_*``), a file unless the caller takes a directory."""
    try:
        target = os.readlink(link)
    except OSError:  # removed meanwhile
        target = "?"
    try:
        os.stat(link)
    except OSError as err:
        if err.errno == errno.ELOOP:  # x -> y -> x: y exists, as a link back; or a chain past 40 links
            return FileNotFoundError(Errors.E_LINK_LOOP.format(path=link, target=target, what=what))
    return FileNotFoundError(Errors.E_BROKEN_LINK.format(path=link, target=target, what=what))


def dangling_link(path: PathLike) -> Optional[Path]:
    """The symbolic link leading nowhere (to a target that does not exist, or round a loop) that is ``path`` or
    the deepest directory above it that is there; None where that one is no such link. mkdir there said "[Errno
    17] File exists: 'link'", of a link whose target does not exist."""
    path = Path(path)
    found = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
    if found is None or not os.path.islink(found):
        return None
    try:
        os.stat(found)
    except OSError as err:
        # the target missing (ENOENT, ENOTDIR) or a loop; another error (EACCES: a link into a directory this
        # account may not enter) is no broken link, and its caller's own error says it
        return found if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP) else None
    return None


def files_listed(paths: Sequence[Path], shown: int = 6) -> str:
    """The names of ``paths`` that a message counts, for it to list (:func:`name_shown`, the first ``shown``): a
    dangling symbolic link marked "(a broken link)", as it counts as a file found (its read names the missing
    target), and "2 found" alone said neither which two nor that one is no file."""
    return listed([name_shown(p.name) + (" (a broken link)" if os.path.islink(p) and not os.path.exists(p) else "")
                   for p in paths], shown)


def refuse_empty_path(path: object, what: str) -> None:
    """A ValueError (:data:`Errors.E_PATH_EMPTY_GIVEN`, naming ``what``, an ``Errors.E_PATH_EMPTY_*``) where
    ``path``, given to a loader or writer of the Python API, is the empty string: ``Path("")`` is the current
    directory, so ``BiLM.load("")`` read it (". is not a spacy-elmo model directory") and ``BiLM.save("")``
    wrote into it. The command line refuses one as a usage error (``given_text`` in ``cli/app.py``)."""
    if isinstance(path, str) and not path:  # any other kind of path says what it names
        raise ValueError(Errors.E_PATH_EMPTY_GIVEN.format(what=what))


def missing_path_error(path: PathLike, message: str, stdin: str = Errors.E_PATH_STDIN,
                       what: str = Errors.E_LINK_TO_FILE) -> FileNotFoundError:
    """The error of an input ``path`` that does not exist: ``stdin`` for ``-`` (standard input elsewhere, which
    no command reads: "- does not exist" said nothing), :data:`Errors.E_PATH_TILDE` where an unexpanded ``~``
    explains it, :func:`broken_link_error` where ``path`` is a symbolic link (dangling, or in a loop: "does not exist.
    Check the path" named no link), else ``message``, formatted by the caller (with ``path`` and whatever else it
    names). ``what``: :func:`broken_link_error`'s, what a link should point at."""
    if os.fspath(path) == "-":
        return FileNotFoundError(stdin)
    expanded = unexpanded_home(path)
    if expanded is not None:
        return FileNotFoundError(Errors.E_PATH_TILDE.format(path=path, expanded=expanded))
    if os.path.islink(path):
        return broken_link_error(path, what)
    return FileNotFoundError(message)


#: The JSON name of what json.loads gives for a JSON text that is no object.
JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def json_shown(value: Any, limit: int = 80) -> str:
    """The JSON value ``value`` (one read from a file) as JSON text for a message (``null``, ``{"a": 1}``, not
    Python's ``None``, ``{'a': 1}``), cut after ``limit`` characters with ``...``: only that much is encoded."""
    shown = ""
    for piece in json.JSONEncoder(ensure_ascii=False).iterencode(value):
        shown += piece
        if len(shown) > limit:
            return shown[:limit] + "..."
    return shown


def read_json_file(path: PathLike, not_json: str, not_object: Optional[str] = None, raw: Optional[bytes] = None) -> Any:
    """The JSON value in the file at ``path`` (decoded from ``raw``, its bytes, where the caller read them): the one
    reader of a JSON file, one the user gave (options.json, a model's config.json) or one of spacy-elmo's own that
    may be damaged or edited (embed's parts manifest and merged.json, the corpus cache's meta.json).

    A ValueError of ``not_json`` (formatted with ``path`` and ``error``) for bytes that are no UTF-8, UTF-16 or
    UTF-32 text or no JSON, and for JSON nested past Python's recursion limit (else a RecursionError's traceback,
    ``[[[...]]]``); with ``not_object``, one of it (formatted with ``path``, ``found``, the value's ``reprlib.repr``,
    and ``kind``, its JSON name) for JSON that is no object. An OSError reading the file is the caller's to say.
    The encodings are those JSON allows, told apart as :func:`json.loads` tells them (``json.detect_encoding``), but
    strict (json.loads of bytes lets UTF-8-encoded lone surrogates through): Windows PowerShell 5.1's ``>`` writes
    UTF-16 with a byte order mark, and was "Pass the options.json that came with the weight file". A leading byte
    order mark (Notepad and PowerShell write one) is no part of the JSON: skipped, not "Unexpected UTF-8 BOM"."""
    if raw is None:
        raw = Path(path).read_bytes()
    try:
        # json.detect_encoding: in the json module since Python 3.6 (undocumented, not in __all__), what json.loads
        # itself calls on bytes
        value = json.loads(raw.decode(json.detect_encoding(raw)))
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError; too deep a nesting
        raise ValueError(not_json.format(path=path, error=str(err).rstrip("."))) from err
    if not_object is not None and not isinstance(value, dict):
        kind = JSON_KINDS.get(type(value), "value")
        raise ValueError(not_object.format(path=path, found=reprlib.repr(value), kind=kind))
    return value


def check_output_path(path: PathLike) -> None:
    """ValueError (:data:`Errors.E_OUTPUT_PATH_TILDE`) for an output path that starts with an unexpanded
    ``~``, whether or not a directory ``~`` exists here already (an earlier run may have made it)."""
    expanded = unexpanded_home(path)
    if expanded is not None:
        raise ValueError(Errors.E_OUTPUT_PATH_TILDE.format(path=path, expanded=expanded))


def holds_cwd(path: PathLike) -> Optional[Path]:
    """The current working directory where the directory ``path`` is it or holds it (``.``, ``..``, an empty
    argument as typer gives it, a link to it: both resolved); None when it is neither, or the current directory
    is gone (removed while this process was in it: nothing there to protect)."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        return None
    real = Path(path).resolve()
    return cwd if real == cwd or real in cwd.parents else None


def file_identity(path: PathLike) -> Tuple[int, Union[int, str]]:
    """``(st_dev, st_ino)`` of the file ``path`` names (links followed): equal for two names of one file, a hard
    link included, whose real paths (``resolve()``) differ. Where the file system reports ``st_ino`` 0 (it
    identifies a file only if non-zero, say Python's docs: some network and FUSE file systems), ``(st_dev, real
    path)``: every file was one, and all but the first were left out of the corpus (and taken for held-out text
    shared with training)."""
    st = os.stat(path)
    return st.st_dev, (st.st_ino if st.st_ino else os.path.realpath(path))


#: The bytes :func:`file_sha256` reads at a time: a file of any size in bounded memory.
HASH_CHUNK = 1 << 20


def file_sha256(path: PathLike, limit: Optional[int] = None) -> str:
    """The sha256 (hex) of the bytes of the file ``path`` names (its first ``limit`` bytes; None: all), read in
    :data:`HASH_CHUNK` pieces: equal for byte-identical copies, which :func:`file_identity` tells apart."""
    with open(path, "rb") as f:
        return stream_sha256(f, limit)


def stream_sha256(f: BinaryIO, limit: Optional[int] = None) -> str:
    """The sha256 (hex) of the bytes read from ``f`` (its next ``limit`` bytes; None: all to its end), read in
    :data:`HASH_CHUNK` pieces (a decompressing reader's too: a resume's check of the corpus's text)."""
    h = hashlib.sha256()
    left = limit
    while left is None or left > 0:
        chunk = f.read(HASH_CHUNK if left is None else min(HASH_CHUNK, left))
        if not chunk:
            break
        h.update(chunk)
        if left is not None:
            left -= len(chunk)
    return h.hexdigest()
