"""Fetching from a mirror or a loopback HTTP server, and TSV manifests."""

import hashlib
import socket
import time

import pytest

from vlbias.errors import FetchError, InputError
from vlbias.io import fetch as fetch_module
from vlbias.io.fetch import DownloadError, Source, cached_download, fetch, read_manifest, sha256_file, write_manifest

GOOD = b"upstream file\n" * 100
GOOD_SHA = hashlib.sha256(GOOD).hexdigest()
HINT = "set `mirror:` in config/config.yaml"


def test_sha256_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(GOOD)
    assert sha256_file(path) == GOOD_SHA


def test_source_url():
    s = Source(repo="ryansteed/ieat", commit="abc", mirror_name="ieat")
    assert s.url("data/a b.jpg") == "https://raw.githubusercontent.com/ryansteed/ieat/abc/data/a%20b.jpg"


# -- mirror --------------------------------------------------------------------------------------

SOURCE = Source(repo="owner/repo", commit="c0ffee", mirror_name="repo",
                url_template="http://127.0.0.1:9/unused/{path}")  # never contacted with a mirror


@pytest.fixture
def mirror(tmp_path):
    root = tmp_path / "mirror"
    (root / "repo/data").mkdir(parents=True)
    (root / "repo/data/f.csv").write_bytes(GOOD)
    return root


def test_mirror_hit(tmp_path, mirror):
    dest = tmp_path / "cache/repo/data/f.csv"
    assert fetch(SOURCE, "data/f.csv", dest, sha256=GOOD_SHA, mirror=str(mirror)) == dest
    assert dest.read_bytes() == GOOD
    assert sorted(p.name for p in dest.parent.iterdir()) == ["f.csv"]


def test_a_pin_in_upper_case_is_the_same_pin(tmp_path, mirror):
    dest = tmp_path / "f.csv"
    assert fetch(SOURCE, "data/f.csv", dest, sha256=GOOD_SHA.upper(), mirror=mirror).read_bytes() == GOOD


def test_mirror_wrong_checksum(tmp_path, mirror):
    dest = tmp_path / "cache/f.csv"
    with pytest.raises(FetchError, match="sha256 mismatch") as e:
        fetch(SOURCE, "data/f.csv", dest, sha256="0" * 64, mirror=mirror)
    assert str(mirror / "repo/data/f.csv") in str(e.value) and "0" * 64 in str(e.value) and GOOD_SHA in str(e.value)
    assert list(dest.parent.iterdir()) == []


def test_failure_keeps_an_earlier_dest(tmp_path, mirror):
    dest = tmp_path / "f.csv"
    dest.write_text("earlier")
    with pytest.raises(FetchError):
        fetch(SOURCE, "data/f.csv", dest, sha256="1" * 64, mirror=mirror)
    assert dest.read_text() == "earlier"


def test_mirror_missing_file(tmp_path, mirror):
    with pytest.raises(FetchError, match="missing from the mirror") as e:
        fetch(SOURCE, "data/absent.jpg", tmp_path / "absent.jpg", sha256=None, mirror=mirror)
    assert e.value.source == str(mirror / "repo/data/absent.jpg")
    assert not (tmp_path / "absent.jpg").exists()


def test_a_folder_at_a_mirror_path_is_missing_from_the_mirror(tmp_path, mirror):
    (mirror / "repo/data/sub.jpg").mkdir()
    with pytest.raises(FetchError, match="missing from the mirror"):
        fetch(SOURCE, "data/sub.jpg", tmp_path / "sub.jpg", sha256=None, mirror=mirror)
    assert not (tmp_path / "sub.jpg").exists()


def test_interrupt_leaves_nothing(tmp_path, mirror, monkeypatch):
    def interrupted(src, dst, max_bytes=None):
        dst.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(fetch_module, "_copy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch(SOURCE, "data/f.csv", tmp_path / "out/f.csv", sha256=None, mirror=mirror)
    assert list((tmp_path / "out").iterdir()) == []


# -- network (a loopback server only) ------------------------------------------------------------


def _slow(handler):
    time.sleep(1.0)
    handler.reply(200, GOOD)


def _unannounced(handler):  # no Content-Length: the body ends when the connection does
    handler.send_response(200)
    handler.end_headers()
    handler.wfile.write(b"x" * 5000)


def _flaky(handler):
    handler.reply(*((500, b"oops") if handler.server.requests["flaky.csv"] == 1 else (200, GOOD)))


ROUTES = {
    "good.csv": GOOD,
    "slow.csv": _slow,
    "big.csv": b"x" * 5000,
    "big-unannounced.csv": _unannounced,
    "to-file.csv": (302, b"", [("Location", "file:///etc/passwd")]),
    "to-ftp.csv": (302, b"", [("Location", "ftp://127.0.0.1/x")]),
    "error.csv": (500, b"oops"),
    "flaky.csv": _flaky,
    # two URLs with one file name, different content: each kept apart
    "a/model_final.pkl": b"weights of a",
    "b/model_final.pkl": b"weights of b",
}


@pytest.fixture(scope="module")
def server(http_server):
    http_server.routes.update(ROUTES)
    return http_server


@pytest.fixture
def source(server):
    server.requests.clear()
    port = server.server_address[1]
    return Source(repo="owner/repo", commit="c0ffee", mirror_name="repo",
                  url_template=f"http://127.0.0.1:{port}/{{repo}}/{{commit}}/{{path}}")


def get(source, path, dest, **kw):
    return fetch(source, path, dest, mirror=None, **{"sha256": None, "timeout": 0.3, "retries": 0, **kw})


def test_download(tmp_path, source, server):
    dest = tmp_path / "d/good.csv"
    get(source, "data/good.csv", dest, sha256=GOOD_SHA)
    assert dest.read_bytes() == GOOD and server.requests["good.csv"] == 1
    assert list(dest.parent.iterdir()) == [dest]


def test_download_wrong_checksum(tmp_path, source):
    with pytest.raises(FetchError, match=f"expected {'a' * 64}, got {GOOD_SHA}") as e:
        get(source, "data/good.csv", tmp_path / "good.csv", sha256="a" * 64)
    assert e.value.source == source.url("data/good.csv")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, why", [
    ("missing.csv", "HTTP 404"),
    ("slow.csv", "no response within 0.3 s"),
    ("big.csv", "larger than the limit of 1000 bytes"),
    ("big-unannounced.csv", "larger than the limit of 1000 bytes"),
    ("to-file.csv", "HTTP 302"),
    ("to-ftp.csv", "refused redirect to ftp://"),
])
def test_download_failures(tmp_path, source, name, why):
    url = source.url(f"data/{name}")
    with pytest.raises(FetchError, match=why) as e:
        get(source, f"data/{name}", tmp_path / name, max_bytes=1000)
    assert str(e.value).startswith(url) and HINT in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_connection_refused(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nobody listens there
    closed = Source("o/r", "c", "r", url_template=f"http://127.0.0.1:{port}/{{path}}")
    with pytest.raises(FetchError, match="connection refused") as e:
        get(closed, "f.csv", tmp_path / "f.csv", retries=1, backoff=0.01)
    assert f"127.0.0.1:{port}/f.csv" in str(e.value) and "after 2 attempts" in str(e.value)
    assert HINT in str(e.value)


def test_only_http_urls(tmp_path):
    local = Source("o/r", "c", "r", url_template="file:///{path}")
    with pytest.raises(FetchError, match="only http"):
        get(local, "etc/passwd", tmp_path / "passwd")
    assert not (tmp_path / "passwd").exists()


def test_retries(tmp_path, source, server):
    with pytest.raises(FetchError, match="after 3 attempts: HTTP 500"):
        get(source, "error.csv", tmp_path / "e.csv", retries=2, backoff=0.01)
    assert server.requests["error.csv"] == 3
    get(source, "flaky.csv", tmp_path / "f.csv", retries=2, backoff=0.01, sha256=GOOD_SHA)
    assert server.requests["flaky.csv"] == 2 and (tmp_path / "f.csv").read_bytes() == GOOD


def test_a_negative_retry_count_is_refused_not_a_silent_none(tmp_path, source, server):
    with pytest.raises(FetchError, match="no attempt made: retries must be at least 0, got -1"):
        get(source, "data/good.csv", tmp_path / "g.csv", retries=-1)
    assert "good.csv" not in server.requests and not (tmp_path / "g.csv").exists()


def test_client_errors_are_not_retried(tmp_path, source, server):
    with pytest.raises(FetchError, match="HTTP 404"):
        get(source, "missing.csv", tmp_path / "m.csv", retries=3, backoff=0.01)
    assert server.requests["missing.csv"] == 1


def test_downloads_cached_by_url_not_file_name(tmp_path, server):
    server.requests.clear()
    a, b = server.url("a/model_final.pkl"), server.url("b/model_final.pkl")
    assert cached_download(a, tmp_path, max_bytes=100).read_bytes() == b"weights of a"
    assert cached_download(b, tmp_path, max_bytes=100).read_bytes() == b"weights of b"
    assert server.requests["b/model_final.pkl"] == 1  # asked for, not served from a's copy
    assert cached_download(a, tmp_path, max_bytes=100).read_bytes() == b"weights of a"
    assert server.requests["a/model_final.pkl"] == 1  # the second time from the cache


def test_downloads_cached_by_pinned_sha256(tmp_path, server):
    server.requests.clear()
    a, b = server.url("a/model_final.pkl"), server.url("b/model_final.pkl")
    sha_a, sha_b = (hashlib.sha256(x).hexdigest() for x in (b"weights of a", b"weights of b"))
    path = cached_download(a, tmp_path, max_bytes=100, sha256=sha_a.upper())
    assert path.name.startswith(sha_a) and path.read_bytes() == b"weights of a"
    # pinned content is the same file whichever URL names it; another pin is another file
    assert cached_download(b, tmp_path, max_bytes=100, sha256=sha_a) == path
    assert server.requests["b/model_final.pkl"] == 0
    with pytest.raises(DownloadError, match=f"sha256 is {sha_b}, not the pinned {'0' * 64}"):
        cached_download(b, tmp_path, max_bytes=100, sha256="0" * 64)
    assert server.requests["b/model_final.pkl"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    path.write_bytes(b"weights of ?")  # a damaged copy is downloaded again
    assert cached_download(a, tmp_path, max_bytes=100, sha256=sha_a).read_bytes() == b"weights of a"
    assert server.requests["a/model_final.pkl"] == 2


# -- manifests -----------------------------------------------------------------------------------


def test_manifest_round_trip(tmp_path):
    path = tmp_path / "m/status.tsv"
    rows = [{"category": "a/b", "file": "x.jpg", "reason": "", "extra": 1},
            {"category": "c", "file": "y z.png", "reason": "bad\tthing\nhappened"}]
    write_manifest(path, rows, ["category", "file", "reason"])
    assert read_manifest(path) == [{"category": "a/b", "file": "x.jpg", "reason": ""},
                                   {"category": "c", "file": "y z.png", "reason": "bad thing happened"}]
    write_manifest(path, [{"a": None, "b": 0}], ["a", "b"])
    assert read_manifest(path) == [{"a": "", "b": "0"}]
    write_manifest(path, [], ["a", "b"])
    assert path.read_text() == "a\tb\n" and read_manifest(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["status.tsv"]
    with pytest.raises(ValueError, match=r"status.tsv: row 0 lacks column\(s\) \['b'\]"):
        write_manifest(path, [{"a": 1}], ["a", "b"])


def test_manifest_comments(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("# source: somewhere\n# second comment\ncategory\tfile\tsha256\na\tx.jpg\t\n\n")
    assert read_manifest(path) == [{"category": "a", "file": "x.jpg", "sha256": ""}]


def test_malformed_manifest(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("# comment\ncategory\tfile\na\tx.jpg\nb\ty.jpg\textra\n")
    with pytest.raises(InputError, match=r"m\.tsv: line 4: 3 tab-separated fields, expected 2") as e:
        read_manifest(path)
    assert e.value.source == str(path)
    path.write_text("# only a comment\n")
    with pytest.raises(InputError, match="no header line"):
        read_manifest(path)
    with pytest.raises(InputError, match="absent.tsv: cannot read manifest"):
        read_manifest(tmp_path / "absent.tsv")


# -- whether a server answers (before a run without a mirror) ---------------------------------------


def test_unreachable_is_none_when_any_server_answers(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/x"  # closed again: nobody listens there
    assert "connection refused" in fetch_module.unreachable(dead, timeout=1)
    assert fetch_module.unreachable([dead, server.url("missing.csv")], timeout=1) is None  # a 404 is an answer
    assert fetch_module.unreachable([dead, dead + "y"], timeout=1) == fetch_module.unreachable(dead, timeout=1)


def test_unreachable_is_bounded_by_its_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()  # connections queue, nobody answers
        start = time.monotonic()
        why = fetch_module.unreachable(f"http://127.0.0.1:{s.getsockname()[1]}/x", timeout=0.3)
    assert why == "no response within 0.3 s" and time.monotonic() - start < 2
