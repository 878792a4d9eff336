"""Web image acquisition: get.sh URL lists, downloads from a loopback server, the mirror, Table 1."""

import hashlib
import io
import os
import time
from collections import Counter
from urllib.parse import urlsplit

import pandas as pd
import pytest
from PIL import Image

from helpers import REPO
from vlbias.errors import FetchError, InputError
from vlbias.images import acquire as acq
from vlbias.images.acquire import (DIGEST_PREFIX, MANIFEST_COLUMNS, acquire, manifest_comments, mark_duplicates,
                                   parse_get_sh, parse_get_sh_tree, pin_sha256, summarize, table1_rows)
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.report.formats import latex_table, markdown_table

COMMITTED = REPO / "resources/manifests/grounded_google_images.tsv"


def get_sh_digests(path):
    """The "<test>/<role> <sha256>" lines recorded in a manifest's header."""
    return [c[len(DIGEST_PREFIX):] for c in manifest_comments(path) if c.startswith(DIGEST_PREFIX)]


def image_bytes(fmt, colour=(200, 30, 30), size=(24, 16)):
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format=fmt)
    return buf.getvalue()


JPEG, PNG, WEBP = image_bytes("JPEG"), image_bytes("PNG", (0, 90, 200), (10, 30)), image_bytes("WEBP", size=(8, 8))


# -- get.sh -------------------------------------------------------------------------------------

GET_SH = r"""#!/bin/bash
wget -O science_0.jpg https://a.example/x.jpg
wget --tries=2 --timeout=10 -O quoted.jpg 'https://a.example/y.jpg?a=1&b=2'
wget --tries=2 --timeout=10 -O amp.jpg https://a.example/z.jpg?quality=75&auto=webp
wget -O esc.jpg https://cdn.example/filters:no_upscale\(\)/x.jpg
sleep 3
			    

# a comment
wget -t 2 -T 5 -O opts.jpg http://h.example/o.jpg  # trailing comment
wget --output-document=long.jpg https://h.example/l.jpg
wget --tries=2 --timeout=10 -O nourl.jpg 
curl -o c.jpg https://c.example/c.jpg
wget https://n.example/no-file-name.jpg
wget -O bad.jpg 'https://unbalanced
wget -O science_0.jpg https://a.example/again.jpg
wget -O two.jpg https://a.example/1.jpg https://a.example/2.jpg
wget -O
"""


def test_parse_get_sh_every_line_shape():
    entries, problems = parse_get_sh(GET_SH, name="t/get.sh")
    assert [(e["file"], e["url"], e["line"]) for e in entries] == [
        ("science_0.jpg", "https://a.example/x.jpg", 2),
        ("quoted.jpg", "https://a.example/y.jpg?a=1&b=2", 3),
        ("amp.jpg", "https://a.example/z.jpg?quality=75&auto=webp", 4),  # as written, not cut at '&'
        ("esc.jpg", "https://cdn.example/filters:no_upscale()/x.jpg", 5),
        ("opts.jpg", "http://h.example/o.jpg", 10),
        ("long.jpg", "https://h.example/l.jpg", 11),
        ("nourl.jpg", "", 12),  # kept: it becomes a failed image "no URL in the manifest"
    ]
    assert problems == [
        "t/get.sh:13: not a wget or sleep command: 'curl': curl -o c.jpg https://c.example/c.jpg",
        "t/get.sh:14: wget without -O <file>: wget https://n.example/no-file-name.jpg",
        "t/get.sh:15: No closing quotation: wget -O bad.jpg 'https://unbalanced",
        "t/get.sh:16: file science_0.jpg is listed again (first at line 2)",
        "t/get.sh:17: 2 URLs in one wget command: wget -O two.jpg https://a.example/1.jpg https://a.example/2.jpg",
        "t/get.sh:18: -O without a file name: wget -O",
    ]


def test_parse_get_sh_tree(tmp_path):
    (tmp_path / "t1/attr1").mkdir(parents=True)
    (tmp_path / "t1/attr1/get.sh").write_text("wget -O a.jpg https://x/a.jpg\nwget -O b.jpg\n")
    (tmp_path / "t1/targ1").mkdir()
    (tmp_path / "t1/targ1/get.sh").write_text("sleep 3\nmkdir x\n")
    (tmp_path / "notes.txt").write_text("ignored")
    rows, digests, problems, warnings = parse_get_sh_tree(tmp_path)
    assert rows == [{"test": "t1", "role": "attr1", "file": "a.jpg", "url": "https://x/a.jpg", "sha256": ""},
                    {"test": "t1", "role": "attr1", "file": "b.jpg", "url": "", "sha256": ""}]
    sha = hashlib.sha256(b"wget -O a.jpg https://x/a.jpg\nwget -O b.jpg\n").hexdigest()
    assert digests[0] == f"t1/attr1 {sha}" and digests[1].startswith("t1/targ1 ")
    assert problems == [f"{tmp_path}/t1/targ1/get.sh:2: not a wget or sleep command: 'mkdir': mkdir x"]
    assert warnings == [f"{tmp_path}/t1/attr1/get.sh:2: b.jpg has no URL; kept with an empty url"]
    with pytest.raises(InputError, match="no <test>/<role>/get.sh"):
        parse_get_sh_tree(tmp_path / "t1")


def test_manifest_command_refuses_unparseable_lines(tmp_path, capsys):
    (tmp_path / "t/r").mkdir(parents=True)
    (tmp_path / "t/r/get.sh").write_text("wget -O a.jpg https://x/a.jpg\ncd /tmp\n")
    out = tmp_path / "m.tsv"
    assert acq._main(["manifest", str(tmp_path), "--upstream", "o/r@c:data", "-o", str(out)]) == 1
    assert "t/r/get.sh:2: not a wget or sleep command: 'cd'" in capsys.readouterr().err
    assert not out.exists()
    (tmp_path / "t/r/get.sh").write_text("wget -O a.jpg https://x/a.jpg\n")
    assert acq._main(["manifest", str(tmp_path), "--upstream", "o/r@c:data", "-o", str(out)]) == 0
    assert read_manifest(out) == [{"test": "t", "role": "r", "file": "a.jpg", "url": "https://x/a.jpg", "sha256": ""}]
    digest = hashlib.sha256(b"wget -O a.jpg https://x/a.jpg\n").hexdigest()
    assert get_sh_digests(out) == [f"t/r {digest}"]


@pytest.fixture(scope="module")
def google_images(mirror):
    root = mirror / "grounded/data/google-images"
    if not root.is_dir():
        pytest.skip(f"needs the grounded URL lists of the local data mirror; {root} is absent")
    return root, parse_get_sh_tree(root)


def test_real_get_sh_files(google_images):
    root, (rows, digests, problems, warnings) = google_images
    assert problems == [] and len(digests) == 68
    assert warnings == [f"{root}/occupations-gender/attr1/get.sh:409: male_librarian_1.jpg has no URL; "
                        "kept with an empty url"]
    per_test = Counter(r["test"] for r in rows)
    assert per_test == {
        "weat3": 1658, "weat6": 780, "weat8": 480, "weat11": 1680, "weat12": 758, "weat13": 577,
        "heilman-gender-double-bind-competent-one-word": 560, "heilman-gender-double-bind-competent-one-sent": 560,
        "heilman-gender-double-bind-likable-one-word": 480, "heilman-gender-double-bind-likable-one-sent": 480,
        "heilman-race-double-bind-competent-one-word": 440, "heilman-race-double-bind-competent-one-sent": 440,
        "heilman-race-double-bind-likable-one-word": 360, "heilman-race-double-bind-likable-one-sent": 360,
        "occupations-gender": 950, "occupations-race": 938, "angry-black-women": 780}
    assert {urlsplit(r["url"]).scheme for r in rows if r["file"] != "male_librarian_1.jpg"} == {"http", "https"}
    per_dir = Counter((r["test"], r["role"], r["file"]) for r in rows)
    assert max(per_dir.values()) == 1
    assert all(acq._unsafe(r["file"]) is None for r in rows)


def test_committed_manifest_is_a_fresh_parse(google_images):
    _, (rows, digests, _, _) = google_images
    committed = read_manifest(COMMITTED)
    assert [{k: r[k] for k in ("test", "role", "file", "url")} for r in committed] == \
           [{k: r[k] for k in ("test", "role", "file", "url")} for r in rows]
    assert get_sh_digests(COMMITTED) == digests


def test_pin_sha256(tmp_path):
    path = tmp_path / "m.tsv"
    rows = [{"test": "t", "role": "r", "file": f, "url": f"https://x/{f}", "sha256": sha}
            for f, sha in [("a.jpg", ""), ("b.jpg", ""), ("c.jpg", "c" * 64), ("d.jpg", "")]]
    write_manifest(path, rows, MANIFEST_COLUMNS, ["source: somewhere", "get.sh sha256 t/r 00"])
    status = [{"test": "t", "role": "r", "file": "a.jpg", "url": "https://x/a.jpg", "status": "ok", "sha256": "a" * 64},
              {"test": "t", "role": "r", "file": "b.jpg", "url": "https://x/b.jpg", "status": "failed", "sha256": ""},
              {"test": "t", "role": "r", "file": "c.jpg", "url": "https://x/c.jpg", "status": "ok", "sha256": "e" * 64},
              {"test": "t", "role": "r", "file": "d.jpg", "url": "https://x/other", "status": "ok", "sha256": "d" * 64}]
    assert pin_sha256(path, status) == 1
    assert [r["sha256"] for r in read_manifest(path)] == ["a" * 64, "", "c" * 64, ""]
    assert get_sh_digests(path) == ["t/r 00"]
    assert path.read_text().startswith("# source: somewhere\n")


# -- acquisition from a loopback server -----------------------------------------------------------


def _slow(handler):
    time.sleep(1.0)
    handler.reply(200, JPEG)


def _flaky(handler):
    handler.reply(*((503, b"busy") if handler.server.requests["flaky.jpg"] == 1 else (200, PNG)))


ROUTES = {
    "good.jpg": JPEG, "good.png": PNG, "changed.jpg": JPEG, "good.webp": WEBP, "copy.jpg": JPEG, "flaky.jpg": _flaky,
    "page.jpg": b"<!DOCTYPE html><html><body>Image not found</body></html>",
    "truncated.jpg": JPEG[: len(JPEG) // 2],
    "empty.jpg": b"",
    "slow.jpg": _slow,
    "to-file.jpg": (302, b"", [("Location", "file:///etc/passwd")]),
    "big.jpg": image_bytes("PNG", size=(300, 300)) + b"\0" * 5000,
}
SETTINGS = {"workers": 4, "timeout": 0.4, "retries": 1, "backoff": 0.01, "max_bytes": 4000}


@pytest.fixture(scope="module")
def server(http_server):
    http_server.routes.update(ROUTES)
    return http_server


def row(server, name, role="targ1", test="t", sha256="", url=None):
    return {"test": test, "role": role, "file": name, "url": server.url(name) if url is None else url,
            "sha256": sha256}


def test_acquire_keeps_good_images_and_records_each_failure(tmp_path, server):
    rows = [row(server, n) for n in ("good.jpg", "good.png", "good.webp", "page.jpg", "truncated.jpg",
                                     "empty.jpg", "missing.jpg", "slow.jpg", "to-file.jpg", "flaky.jpg",
                                     "big.jpg")]
    rows += [row(server, "copy.jpg", role="attr1"),
             row(server, "../evil.jpg", url=server.url("good.jpg")),
             row(server, "nourl.jpg", url=""),
             row(server, "local.jpg", url="file:///etc/passwd"),
             row(server, "changed.jpg", sha256="0" * 64),
             row(server, "nohost.jpg", url="http:sphr//example.com/x.jpg")]  # a real typo upstream
    cache = tmp_path / "cache"
    server.requests.clear()
    status = acquire(rows, cache, **SETTINGS)
    by = {(s["test"], s["role"], s["file"]): s for s in status}
    assert [(s["test"], s["role"], s["file"]) for s in status] == [(r["test"], r["role"], r["file"]) for r in rows]

    ok = {k[2]: s for k, s in by.items() if s["status"] == "ok"}
    assert sorted(ok) == ["copy.jpg", "flaky.jpg", "good.jpg", "good.png", "good.webp"]
    assert (ok["good.png"]["width"], ok["good.png"]["height"], ok["good.png"]["bytes"]) == (10, 30, len(PNG))
    assert ok["good.jpg"]["sha256"] == hashlib.sha256(JPEG).hexdigest()
    assert ok["good.jpg"]["path"] == os.path.relpath(cache / "t/targ1/good.jpg")
    assert (cache / "t/targ1/good.webp").read_bytes() == WEBP
    assert ok["copy.jpg"]["reason"] == "duplicate of t/targ1/good.jpg" and ok["good.jpg"]["reason"] == ""
    assert server.requests["flaky.jpg"] == 2

    reasons = {k: s["reason"] for k, s in by.items() if s["status"] == "failed"}
    assert all(by[k]["path"] == "" and by[k]["sha256"] == "" for k in reasons)
    assert "looks like HTML" in reasons["t", "targ1", "page.jpg"]
    assert "truncated" in reasons["t", "targ1", "truncated.jpg"]
    assert reasons["t", "targ1", "empty.jpg"] == "empty file"
    assert reasons["t", "targ1", "missing.jpg"] == "could not download: HTTP 404 Not Found"
    assert reasons["t", "targ1", "slow.jpg"] == "could not download after 2 attempts: no response within 0.4 s"
    assert "file:///etc/passwd" in reasons["t", "targ1", "to-file.jpg"]
    assert "larger than the limit of 4000 bytes" in reasons["t", "targ1", "big.jpg"]
    assert reasons["t", "targ1", "../evil.jpg"] == "unsafe file name '../evil.jpg' (must be a plain file name)"
    assert reasons["t", "targ1", "nourl.jpg"] == "no URL in the manifest"
    assert "only http(s)" in reasons["t", "targ1", "local.jpg"]
    assert reasons["t", "targ1", "changed.jpg"] == \
        f"content changed upstream (sha256 {ok['good.jpg']['sha256']}, pinned {'0' * 64})"
    assert reasons["t", "targ1", "nohost.jpg"] == "could not download: no host given"
    # nothing but the images that arrived is kept, and nothing outside the cache
    kept = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
    assert kept == ["t/attr1/copy.jpg", "t/targ1/flaky.jpg", "t/targ1/good.jpg", "t/targ1/good.png",
                    "t/targ1/good.webp"]
    assert not (tmp_path / "evil.jpg").exists()

    # a rerun asks for no image it has and rewrites none
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    server.requests.clear()
    again = acquire(rows, cache, **SETTINGS)
    assert again == status
    assert not {"good.jpg", "good.png", "good.webp", "copy.jpg", "flaky.jpg"} & set(server.requests)
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == before


def test_cached_file_that_is_not_the_pinned_image_is_fetched_again(tmp_path, server):
    cache = tmp_path / "cache"
    (cache / "t/targ1").mkdir(parents=True)
    (cache / "t/targ1/good.jpg").write_bytes(PNG)  # decodes, but is not the pinned content
    (cache / "t/targ1/good.png").write_text("<html>stale</html>")  # does not decode
    server.requests.clear()
    status = acquire([row(server, "good.jpg", sha256=hashlib.sha256(JPEG).hexdigest()), row(server, "good.png")],
                     cache, **SETTINGS)
    assert [s["status"] for s in status] == ["ok", "ok"]
    assert server.requests["good.jpg"] == 1 and server.requests["good.png"] == 1
    assert (cache / "t/targ1/good.jpg").read_bytes() == JPEG and (cache / "t/targ1/good.png").read_bytes() == PNG


def test_listed_twice(tmp_path, server):
    status = acquire([row(server, "good.jpg"), row(server, "good.jpg")], tmp_path, **SETTINGS)
    assert status[0]["status"] == "ok"
    assert (status[1]["status"], status[1]["reason"]) == ("failed", "listed twice (also row 1)")


def test_mirror_is_read_never_the_network(tmp_path, server):
    mirror = tmp_path / "mirror"
    (mirror / "t/attr1").mkdir(parents=True)
    (mirror / "t/attr1/a.png").write_bytes(PNG)
    (mirror / "t/attr1/page.jpg").write_text("<html><body>gone</body></html>")
    rows = [row(server, "a.png", role="attr1"), row(server, "page.jpg", role="attr1"),
            row(server, "good.jpg", role="attr1"), row(server, "nourl.png", role="attr1", url="")]
    server.requests.clear()
    status = acquire(rows, tmp_path / "cache", mirror=mirror, **SETTINGS)
    assert [s["status"] for s in status] == ["ok", "failed", "failed", "failed"]
    assert status[0]["path"].endswith("cache/t/attr1/a.png") and (tmp_path / "cache/t/attr1/a.png").read_bytes() == PNG
    assert "looks like HTML" in status[1]["reason"]
    assert status[2]["reason"] == f"not in mirror {mirror}/t/attr1/good.jpg"
    assert status[3]["reason"] == f"not in mirror {mirror}/t/attr1/nourl.png"
    assert not server.requests
    # an image the cache holds is read from there, though the mirror has it no longer
    (mirror / "t/attr1/a.png").unlink()
    assert acquire(rows[:1], tmp_path / "cache", mirror=mirror, **SETTINGS)[0]["status"] == "ok"
    with pytest.raises(FetchError, match="the mirror has no such folder"):
        acquire(rows, tmp_path / "cache", mirror=tmp_path / "absent", **SETTINGS)


# -- dataset statistics ---------------------------------------------------------------------------


def status_row(test, file, status="ok", sha="s1"):
    return {"test": test, "role": "r", "file": file, "status": status, "reason": "" if status == "ok" else "x",
            "sha256": sha if status == "ok" else ""}


def test_duplicates_and_summary():
    status = [status_row("a", "1", sha="s1"), status_row("a", "2", sha="s1"), status_row("a", "3", "failed"),
              status_row("b", "1", sha="s1"), status_row("b", "2", sha="s2")]
    mark_duplicates(status)
    assert [s["reason"] for s in status] == ["", "duplicate of a/r/1", "x", "duplicate of a/r/1", ""]
    # duplicates in the summary count within a test only
    assert summarize(status) == [{"test": "a", "listed": 3, "obtained": 2, "failed": 1, "duplicates": 1},
                                 {"test": "b", "listed": 2, "obtained": 2, "failed": 0, "duplicates": 0}]


def test_the_summary_line_counts_failures_by_kind():
    failed = lambda reason: {"status": "failed", "reason": reason}
    status = [{"status": "ok", "reason": ""}, *[failed(f"not in mirror /m/t/r/{i}.jpg") for i in range(3)],
              failed("could not download: HTTP 404 Not Found"),
              failed("could not download after 2 attempts: HTTP 404 Not Found"),
              failed("could not download after 2 attempts: host name not resolved, network unreachable? (x)"),
              failed("listed twice (also row 1)"), failed("not an image: looks like HTML (text/html)")]
    assert acq.reason_kind(status[-1]["reason"]) == "not an image"
    assert acq.arrived(status, "f.tsv") == ("1 of 9 images arrived; 3 not in the mirror, 2 HTTP 404 Not Found, "
                                            "1 host name not resolved, network unreachable?, 2 failed otherwise "
                                            "— see f.tsv")
    assert acq.arrived(status[:1]) == "1 of 1 images arrived"


def test_table1_rows():
    published = [{"dataset": "google", "paper_test": "C6", "tests": "weat6", "n_images": "780"},
                 {"dataset": "google", "paper_test": "DB", "tests": "db-word db-sent", "n_images": "560"},
                 {"dataset": "coco", "paper_test": "C6", "tests": "weat6", "n_images": "254"}]
    summaries = {"google": [{"test": "weat6", "listed": "780", "obtained": "700", "failed": "80", "duplicates": "3"},
                            {"test": "db-word", "listed": "560", "obtained": "500", "failed": "60", "duplicates": "0"},
                            {"test": "extra", "listed": "5", "obtained": "5", "failed": "0", "duplicates": "0"}]}
    rows = table1_rows(published, summaries)
    assert [(r["dataset"], r["paper_test"], r["test"], r["listed"], r["obtained"], r["paper"]) for r in rows] == [
        ("google", "C6", "weat6", "780", "700", "780"),
        ("google", "DB", "db-word", "560", "500", "560"),
        ("google", "DB", "db-sent", "", "", "560"),  # not obtained here (not configured)
        ("coco", "C6", "weat6", "", "", "254"),
        ("google", "", "extra", "5", "5", ""),
    ]
    assert not any(r["note"] for r in rows)
    # a zero says why, from the dataset's failures
    summaries["google"][0] |= {"obtained": "0", "failed": "780"}
    failed = [{"test": "weat6", "reason": f"not in mirror /m/{i}.jpg"} for i in range(779)] + [
        {"test": "weat6", "reason": "no URL in the manifest"}, {"test": "db-word", "reason": "no URL in the manifest"}]
    rows = table1_rows(published, summaries, {"google": (failed, "f.tsv")})
    assert rows[0]["obtained"] == "0" and rows[0]["note"] == \
        "none obtained: 779 not in the mirror, 1 no URL in the manifest — see f.tsv"
    assert [r["note"] for r in rows[1:]] == [""] * 4  # db-word obtained some


def test_published_table1_names_every_upstream_test():
    published = read_manifest(REPO / "resources/published/grounded_table1.tsv")
    google = [t for p in published if p["dataset"] == "google" for t in p["tests"].split()]
    assert sorted(google) == sorted({r["test"] for r in read_manifest(COMMITTED)})


def test_generic_table_writers():
    df = pd.DataFrame({"test": ["C3: EA/AA", "a_b & 50%"], "n": pd.array([1648, None], dtype="Int64")})
    md = markdown_table(df, "Table 1", note="n: images")
    assert "| C3: EA/AA | 1648 |" in md and "| a_b & 50% |  |" in md and md.endswith("n: images\n")
    tex = latex_table(df, "Images_per test", label="tab:t1")
    assert r"\begin{tabular}{lr}" in tex and r"a\_b \& 50\% &  \\" in tex and r"\caption{Images\_per test}" in tex
