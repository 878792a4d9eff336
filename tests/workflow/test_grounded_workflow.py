"""The real Snakefile obtaining grounded-dataset images from a loopback server, and Table 1."""

import io
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from helpers.project import make_project, planned_jobs, snakemake, write_yaml
from vlbias.images.acquire import STATUS_COLUMNS

pytestmark = pytest.mark.workflow

TARGETS = ["results/grounded/table1.csv", "results/grounded/table1.md", "results/grounded/table1.tex",
           "results/images/grounded/google/manifest.tsv", "results/images/grounded/google/failures.tsv",
           "results/images/grounded/google/summary.tsv"]


def image(fmt, colour):
    buf = io.BytesIO()
    Image.new("RGB", (12, 9), colour).save(buf, format=fmt)
    return buf.getvalue()


ROUTES = {"a0.jpg": image("JPEG", (250, 0, 0)), "a1.png": image("PNG", (0, 250, 0)),
          "b0.jpg": image("JPEG", (0, 0, 250)), "dup.jpg": image("JPEG", (250, 0, 0)),
          "page.jpg": b"<html><body>moved</body></html>"}
MANIFEST = [("toy-a", "targ1", "a0.jpg"), ("toy-a", "attr1", "a1.png"), ("toy-a", "attr1", "page.jpg"),
            ("toy-a", "attr1", "gone.jpg"), ("toy-b", "targ1", "b0.jpg"), ("toy-b", "attr1", "dup.jpg"),
            ("toy-b", "attr1", "nourl.jpg")]


@pytest.fixture(scope="module")
def project(tmp_path_factory, http_server):
    http_server.routes.update(ROUTES)
    root = tmp_path_factory.mktemp("grounded")
    config = make_project(root)
    config["mirror"] = None  # the images come from the loopback server
    rows = [(t, r, f, "" if f == "nourl.jpg" else http_server.url(f), "") for t, r, f in MANIFEST]
    (root / "resources/manifests/google.tsv").write_text(
        "# toy URL lists\ntest\trole\tfile\turl\tsha256\n" + "".join("\t".join(r) + "\n" for r in rows))
    (root / "resources/published/table1.tsv").parent.mkdir(parents=True, exist_ok=True)
    (root / "resources/published/table1.tsv").write_text(
        "dataset\tpaper_test\ttests\tn_images\ngoogle\tToy A\ttoy-a\t4\ngoogle\tToy B\ttoy-b\t2\n"
        "coco\tC6: M/W, Career/Family\tweat6\t254\n")
    config["grounded"] = {
        "images": {"datasets": {"google": {"manifest": "resources/manifests/google.tsv",
                                           "mirror_dir": "data/google-images"}},
                   "download": {"workers": 2, "timeout": 1, "retries": 0, "backoff": 0.01, "max_mb": 1}},
        "table1": {"published": "resources/published/table1.tsv"}}
    write_yaml(root / "config/config.yaml", config)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("no_proxy", "*")  # the loopback server must be reached directly
        snakemake(root, *TARGETS)
    return root


def read(path):
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)


def test_status_and_failure_tables(project):
    out = project / "results/images/grounded/google"
    dataset = read(out / "manifest.tsv")
    assert list(dataset.columns) == STATUS_COLUMNS and len(dataset) == len(MANIFEST)
    a = dataset[dataset["test"] == "toy-a"]
    assert list(zip(a["file"], a["status"])) == [("a0.jpg", "ok"), ("a1.png", "ok"), ("page.jpg", "failed"),
                                                 ("gone.jpg", "failed")]
    ok = a[a["status"] == "ok"]
    assert all((project / p).read_bytes() == ROUTES[f] for p, f in zip(ok["path"], ok["file"]))
    assert ok["path"].iloc[0] == "results/cache/grounded/data/google-images/toy-a/targ1/a0.jpg"
    assert list(ok["width"]) == ["12", "12"] and list(ok["height"]) == ["9", "9"]
    failures = read(out / "failures.tsv").set_index("file")
    assert "looks like HTML" in failures.loc["page.jpg", "reason"]
    assert failures.loc["gone.jpg", "reason"] == "could not download: HTTP 404 Not Found"
    # the job's summary line, the one the terminal shows: the failures counted by kind, and where they are listed
    assert (project / "results/logs/grounded_images/google.log").read_text().rstrip().endswith(
        "grounded images google: 4 of 7 images arrived; 1 not an image, 1 HTTP 404 Not Found, 1 no URL in the "
        "manifest — see results/images/grounded/google/failures.tsv")
    # a duplicate across tests is marked in the dataset's table
    assert dataset.set_index("file").loc["dup.jpg", "reason"] == "duplicate of toy-a/targ1/a0.jpg"
    assert list(failures.index) == ["page.jpg", "gone.jpg", "nourl.jpg"]
    assert failures.loc["nourl.jpg", "reason"] == "no URL in the manifest"
    summary = read(out / "summary.tsv").set_index("test")
    assert summary.loc["toy-a", "obtained"] == "2" and summary.loc["toy-b", "failed"] == "1"


def test_table1(project):
    t = pd.read_csv(project / "results/grounded/table1.csv", dtype=str, keep_default_na=False)
    assert t.values.tolist() == [["google", "Toy A", "toy-a", "4", "2", "0", "4", ""],
                                 ["google", "Toy B", "toy-b", "3", "2", "0", "2", ""],
                                 ["coco", "C6: M/W, Career/Family", "weat6", "", "", "", "254", ""]]
    assert "| google | Toy A | toy-a | 4 | 2 | 0 | 4 |  |" in (project / "results/grounded/table1.md").read_text()
    assert r"coco & C6: M/W, Career/Family & weat6 &  &  &  & 254 &  \\" in \
        (project / "results/grounded/table1.tex").read_text()


def test_second_run_does_nothing_and_a_forced_one_fetches_only_failures(project, http_server):
    assert planned_jobs(project, *TARGETS) == {}
    http_server.requests.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("no_proxy", "*")
        snakemake(project, *TARGETS, "--forcerun", "grounded_images")
    assert set(http_server.requests) == {"page.jpg", "gone.jpg"}  # the images in the cache are not asked for


def test_without_a_grounded_section_nothing_grounded_is_planned(tmp_path):
    make_project(tmp_path)  # its config has no `grounded` key: it still validates
    planned = planned_jobs(tmp_path)
    assert planned and not [rule for rule in planned if rule.startswith("grounded")]
    assert not Path(tmp_path, "results").exists()
