"""The real Snakefile builds region stores: a tiny project (tests/helpers/project.py), a pre-made
image manifest where the grounded image rules would write it, and torchvision's Faster R-CNN on
random weights at a tiny input size."""

import h5py
import numpy as np
import pytest
from PIL import Image

from helpers.project import make_project, planned_jobs, snakemake, write_yaml
from vlbias.io.fetch import read_manifest

pytestmark = pytest.mark.workflow

DETECTOR = {"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 2, "max_boxes": 6,
            "conf": 0.5, "min_size": 64, "max_size": 96, "batch_size": 2, "device": "cpu"}
COLUMNS = ["test", "role", "file", "url", "status", "reason", "sha256", "bytes", "width", "height", "path"]


def write_image_manifest(root, path):
    """Three decodable images, one failed download, one HTML page saved as .jpg; as acquisition lists them."""
    rng = np.random.default_rng(0)
    rows = []
    for i, (role, h, w) in enumerate([("target1", 40, 60), ("target2", 64, 48), ("attr1", 50, 50)]):
        f = root / "images" / f"{role}/img{i}.jpg"
        f.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(f)
        rows.append(["toy-test", role, f.name, "http://x", "ok", "", "", "", str(w), str(h), str(f.relative_to(root))])
    rows.append(["toy-test", "attr2", "gone.jpg", "http://x", "failed", "HTTP 404", "", "", "", "", ""])
    page = root / "images/attr2/page.jpg"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("<!DOCTYPE html><html>Not found</html>")
    rows.append(["toy-test", "attr2", "page.jpg", "http://x", "ok", "", "", "", "1", "1", str(page.relative_to(root))])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(r) for r in [COLUMNS, *rows]) + "\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("regions")
    config = make_project(root)
    write_image_manifest(root, root / "results/images/grounded/toy/manifest.tsv")
    # one torch thread: a second one only spins while the other core is busy (5 times the detector's CPU)
    config["regions"] = {"threads": 1, "detectors": {"frcnn-tiny": DETECTOR},
                         "manifests": {"other": "elsewhere/manifest.tsv"},
                         "build": [{"dataset": "toy", "detector": "frcnn-tiny"}]}
    write_yaml(root / "config/config.yaml", config)
    snakemake(root, "results/regions/toy/frcnn-tiny.h5", "results/regions/toy/frcnn-tiny.persons.tsv")
    return root


def test_store_and_masking_list_are_built(project):
    with h5py.File(project / "results/regions/toy/frcnn-tiny.h5") as f:
        assert [s.decode() for s in f["images/id"][()]] == ["toy-test/attr1/img2.jpg", "toy-test/target1/img0.jpg",
                                                            "toy-test/target2/img1.jpg"]
        assert list(f["images/width"][()]) == [50, 60, 48] and list(f["images/height"][()]) == [50, 40, 64]
        assert f["regions/features"].shape[1] == 1024 and all(2 <= n <= 6 for n in f["images/count"][()])
        assert [s.decode() for s in f["skipped/id"][()]] == ["toy-test/attr2/page.jpg"]
        assert f.attrs["detector"] == "frcnn-tiny" and f.attrs["weights"] == "random" and f.attrs["n_skipped"] == 1
        assert len(f.attrs["manifest_sha256"]) == 64
        person = f["regions/is_person"][()]
    rows = read_manifest(project / "results/regions/toy/frcnn-tiny.persons.tsv")
    assert [r["id"] for r in rows] == ["toy-test/attr1/img2.jpg", "toy-test/target1/img0.jpg",
                                       "toy-test/target2/img1.jpg"]
    assert sum(int(r["n_person"]) for r in rows) == person.sum()
    log = (project / "results/logs/regions/toy/frcnn-tiny.log").read_text()
    assert "toy-test/attr2/page.jpg: skipped: not an image" in log


def test_default_target_and_manifest_override(project):
    # built and up to date: the default target (which lists the pair) plans no region job
    assert "regions" not in planned_jobs(project)
    # a dataset under regions/manifests reads that file, which no rule makes
    proc = snakemake(project, "--dry-run", "results/regions/other/frcnn-tiny.h5", check=False)
    assert proc.returncode != 0 and "elsewhere/manifest.tsv" in proc.stdout + proc.stderr


def test_build_naming_an_unknown_detector_fails_naming_the_key(tmp_path):
    config = make_project(tmp_path)
    config["regions"] = {"detectors": {}, "build": [{"dataset": "toy", "detector": "nope"}]}
    write_yaml(tmp_path / "config/config.yaml", config)
    proc = snakemake(tmp_path, "--dry-run", check=False)
    assert proc.returncode != 0 and "regions/build/0/detector" in proc.stdout + proc.stderr
