"""The one confinement rule for paths from data (vlbias.io.paths) and its readers: a manifest row, a published table's path or a name may not lead outside its folder."""

import copy
import os

import pytest
import yaml
from helpers import REPO

from vlbias.config import ConfigError, check_config
from vlbias.errors import InputError
from vlbias.io.fetch import Source, read_manifest
from vlbias.io.paths import confined, relative_path
from vlbias.suites.ieat import image_entries, obtain, published_store

SOURCE = Source(repo="owner/repo", commit="c0ffee", mirror_name="repo", url_template="http://127.0.0.1:9/{path}")


@pytest.mark.parametrize("path,why", [
    ("../x.jpg", "a '..' component"),
    ("a/../../x.jpg", "a '..' component"),
    ("/tmp/x.jpg", "an absolute path"),
    ("a\0b.jpg", "a control character"),
    ("a.jpg\n", "a control character"),
    ("a\tb", "a control character"),
    ("a\x7fb.jpg", "a control character"),  # DEL
    ("a\\..\\b", "a backslash"),
    ("", "an empty path"),
    (".", "no file name"),
    ("a/" + "é" * 101, "a name longer than 200 bytes"),  # found by the hostile-input suite: an OSError
])
def test_a_path_breaking_the_rule_is_named_with_its_source(tmp_path, path, why):
    with pytest.raises(InputError, match=f"^m.tsv: line 3: {why}"):
        confined(tmp_path, path, "m.tsv: line 3")


def test_a_path_keeping_the_rule_is_the_root_joined(tmp_path):
    assert confined(tmp_path, "a/./b.jpg", "m") == tmp_path / "a/b.jpg"
    assert str(relative_path("café/ünï.jpg", "m")) == "café/ünï.jpg"
    for name in ("x" * 200, "é" * 100, "a~b.jpg"):  # names of NAME_MAX bytes exactly, the last printable ASCII
        assert relative_path(f"d/{name}", "m").name == name


def test_a_symbolic_link_leading_outside_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "root/link")
    with pytest.raises(InputError, match="leads outside"):
        confined(tmp_path / "root", "link/x.jpg", "m")
    os.symlink(tmp_path / "root", tmp_path / "alias")  # the root itself may be a link
    assert confined(tmp_path / "alias", "x.jpg", "m") == tmp_path / "alias/x.jpg"


def _manifest(tmp_path, header, row):
    path = tmp_path / "manifest.tsv"
    path.write_text(f"# comment\n{header}\n\n{row}\n", encoding="utf-8")
    return path


def test_row_2_an_ieat_image_manifest_row_leading_outside_reads_and_writes_nothing(tmp_path):
    # row 2: `file: ../../…/tmp/x.jpg` was read from outside the mirror and written outside the cache
    outside = tmp_path / "x.jpg"
    outside.write_bytes(b"secret")
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    (mirror / "repo/data/experiments/c").mkdir(parents=True)
    manifest = _manifest(tmp_path, "category\tfile\tsha256", "c\t../../../../x.jpg\t")
    with pytest.raises(InputError, match=r"manifest.tsv: line 4, column file: a '\.\.' component"):
        image_entries(manifest, SOURCE, str(mirror), cache)
    assert not cache.exists()
    manifest = _manifest(tmp_path, "category\tfile\tsha256", "../..\tx.jpg\t")
    with pytest.raises(InputError, match="line 4, column category"):
        image_entries(manifest, SOURCE, str(mirror), cache)


def test_row_2_a_published_embeddings_path_leading_outside_is_refused(tmp_path):
    manifest = _manifest(tmp_path, "model_file\tcategory\tpath\tsha256", f"m\tc\t{tmp_path}/x.csv\t")
    with pytest.raises(InputError, match="line 4, column path: an absolute path"):
        published_store(manifest, "m", SOURCE, str(tmp_path), tmp_path / "cache", tmp_path / "out.h5", {})
    # obtain() itself, whoever calls it: neither the cache nor the mirror is left
    with pytest.raises(InputError, match="upstream owner/repo@c0ffee: a '..' component"):
        obtain(SOURCE, "data/../../x.csv", "", str(tmp_path), tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_a_manifest_without_path_columns_is_read_as_before(tmp_path):
    manifest = _manifest(tmp_path, "a\tb", "../x\t/y")
    assert read_manifest(manifest) == [{"a": "../x", "b": "/y"}]


SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())


@pytest.mark.parametrize("section", ["seat", "ieat", "grounded", "mlm"])
def test_row_9_a_model_name_ending_in_a_newline_is_refused(section):
    # row 9: `$` matched before a final newline; the name became results/embeddings/seat/vx\n.h5
    config = copy.deepcopy(CONFIG)
    models = config[section]["models"]
    models["vx\n"] = models[list(models)[-1]]
    with pytest.raises(ConfigError, match=r"'vx\\n' does not match"):
        check_config(config, SCHEMA, root=REPO)
    del models["vx\n"]
    models["vx"] = models[list(models)[-1]]
    check_config(config, SCHEMA, root=REPO)


def test_a_manifest_lacking_a_column_its_reader_needs_is_named(tmp_path):
    # found by tests/io/test_hostile_inputs.py: a misspelt header was a KeyError
    manifest = _manifest(tmp_path, "category\tfile\trha256", "c\tx.jpg\t")
    with pytest.raises(InputError, match=r"manifest.tsv: line 2: the header lacks column\(s\) sha256 \(it has: "
                                         r"category, file, rha256\)"):
        image_entries(manifest, SOURCE, None, tmp_path / "cache")
    # lines end at "\n": an odd character in a row does not split it (nor shift the line numbers)
    manifest = _manifest(tmp_path, "a\tb", "x\x85y\tz\u2028")
    assert read_manifest(manifest) == [{"a": "x\x85y", "b": "z\u2028"}]
