"""Mutation audit of spacy_elmo/paths.py: each helper's contract, tested directly (fast, no CLI run)."""

import errno
import json
import os
from pathlib import Path

import pytest

from spacy_elmo import paths
from spacy_elmo.errors import Errors
from spacy_elmo.paths import (
    dangling_link, files_listed, holds_cwd, json_shown, missing_path_error, name_shown, read_json_file, refuse_empty_path,
    shell_quoted,
)


def test_shell_quoted_pastes_a_path_with_a_space_as_one_word():
    assert shell_quoted("plain/path.txt") == "plain/path.txt"
    assert shell_quoted(Path("my dir/x.txt")) == "'my dir/x.txt'"


@pytest.mark.parametrize("name", ["a b.txt", "a\tb", "a\nb", "bell\x07.txt", "a,b.txt", "it's", 'say"x"'])
def test_name_shown_quotes_a_name_a_listing_would_misread(name):
    """Whitespace, a character that does not print, a comma or a quote: as a Python string literal."""
    assert name_shown(name) == repr(name)


def test_name_shown_leaves_a_plain_name_plain():
    assert name_shown(Path("dir/model-1.hdf5")) == "dir/model-1.hdf5"


def test_missing_path_error_of_a_dash_names_standard_input():
    err = missing_path_error("-", "NOT USED {path}")
    assert isinstance(err, FileNotFoundError) and str(err) == Errors.E_PATH_STDIN
    assert str(missing_path_error("-", "x", stdin="custom stdin")) == "custom stdin"


def test_missing_path_error_of_an_unexpanded_tilde_says_what_a_shell_would_have_made(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    err = missing_path_error("~/no-such.txt", "NOT USED")
    assert isinstance(err, FileNotFoundError)
    assert str(err) == Errors.E_PATH_TILDE.format(path="~/no-such.txt", expanded=str(tmp_path / "no-such.txt"))
    # a path that is neither '-', nor a tilde, nor a link: the caller's message
    assert str(missing_path_error(tmp_path / "gone.txt", "caller's message")) == "caller's message"


def test_files_listed_marks_only_dangling_links_and_shows_six(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "good.json").symlink_to(tmp_path / "real.json")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    paths = [tmp_path / "real.json", tmp_path / "good.json", tmp_path / "dangling.json"]
    assert files_listed(paths) == "real.json, good.json, dangling.json (a broken link)"
    many = [tmp_path / f"f{i}.hdf5" for i in range(8)]
    assert files_listed(many) == "f0.hdf5, f1.hdf5, f2.hdf5, f3.hdf5, f4.hdf5, f5.hdf5 and 2 more"


def test_dangling_link_is_a_link_to_nothing_or_round_a_loop_not_one_this_account_may_not_follow(tmp_path,
                                                                                             monkeypatch):
    """A link whose target is missing (or one under it), or a loop, is dangling, at the path or at the deepest
    directory above it that is there; a link into a directory this account may not enter is not (its stat raises
    EACCES: export's own "could not write" says it; Path.exists() raised that PermissionError as a traceback)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "good").symlink_to(tmp_path / "real")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert dangling_link(tmp_path / "good") is None and dangling_link(tmp_path / "good" / "new") is None
    assert dangling_link(tmp_path / "gone") == tmp_path / "gone"
    assert dangling_link(tmp_path / "gone" / "a" / "b") == tmp_path / "gone"
    assert dangling_link(tmp_path / "loop") == tmp_path / "loop"
    assert dangling_link(tmp_path / "absent" / "new") is None  # nothing there is a link
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if Path(path) == tmp_path / "good":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(paths.os, "stat", stat)
    assert dangling_link(tmp_path / "good") is None


def test_json_shown_cuts_past_its_limit_only():
    assert json_shown({"a": [1, None, True]}) == '{"a": [1, null, true]}'
    assert json_shown("abcdefgh", limit=10) == '"abcdefgh"'  # exactly the limit: whole, no "..."
    assert json_shown("abcdefgh", limit=9) == '"abcdefgh...'
    assert json_shown("x" * 100, limit=10) == '"' + "x" * 9 + "..."  # one piece longer than the limit, cut


@pytest.mark.parametrize("text,kind", [("[1, 2]", "array"), ('"s"', "string"), ("3", "number"), ("2.5", "number"),
                                       ("true", "boolean"), ("null", "null")])
def test_read_json_file_names_the_json_kind_of_a_value_that_is_no_object(tmp_path, text, kind):
    path = tmp_path / "meta.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        read_json_file(path, "NOT JSON {error}", "{path}: {kind} {found}")
    assert str(info.value).startswith(f"{path}: {kind} ")
    assert read_json_file(path, "NOT JSON {error}") == json.loads(text)  # without not_object: the value as it is


def test_holds_cwd_is_the_cwd_for_it_or_a_directory_above_it(tmp_path, monkeypatch):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    cwd = inner.resolve()
    assert holds_cwd(".") == cwd and holds_cwd("") == cwd
    assert holds_cwd("..") == cwd and holds_cwd(tmp_path) == cwd
    assert holds_cwd(inner / "c") is None and holds_cwd(tmp_path / "other") is None


def test_holds_cwd_is_none_where_the_current_directory_is_gone(monkeypatch):
    def gone():
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(Path, "cwd", staticmethod(gone))
    assert holds_cwd(".") is None


def test_refuse_empty_path_refuses_only_the_empty_string():
    """"" is Path("") is the current directory; " " is a file name like any other, and Path(".") says what it names."""
    with pytest.raises(ValueError) as info:
        refuse_empty_path("", Errors.E_PATH_EMPTY_OPTIONS)
    assert str(info.value) == Errors.E_PATH_EMPTY_GIVEN.format(what=Errors.E_PATH_EMPTY_OPTIONS)
    for path in [" ", ".", Path(""), Path(".")]:
        refuse_empty_path(path, Errors.E_PATH_EMPTY_OPTIONS)
