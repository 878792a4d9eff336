"""The real Snakefile builds the masked-entity association tables and figures: a tiny project
(tests/helpers/project.py) with the shipped stimuli, a few generated images through the regions
rule (torchvision's Faster R-CNN on random weights at a tiny size), and tiny random VL-BERT (the
paper's model), VisualBERT, FLAVA, ViLT and BERT models with the real bert-base-uncased vocabulary, and
BridgeTower with a tiny RoBERTa-style tokenizer. VisualBERT stands for the models that read the region
store's features (LXMERT's masked-word probabilities are tests/suites/mlm/test_mlm.py's: the workflow
feeds it as VisualBERT); each of the others reads its input its own way."""

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from helpers import REPO
from helpers.tiny import TINY_BRIDGETOWER, TINY_FLAVA, TINY_VILT, tiny_bpe_tokenizer
from helpers.tiny import TINY_VISUALBERT_LXMERT as TINY
from helpers.tiny import TINY_VLBERT_E2E as E2E
from helpers.project import make_project, planned_jobs, snakemake, write_yaml
from vlbias.io.fetch import read_manifest

pytestmark = pytest.mark.workflow

DETECTOR = {"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 2, "max_boxes": 4,
            "conf": 0.5, "min_size": 64, "max_size": 96, "batch_size": 4, "device": "cpu"}
FEATURES = 1024  # the torchvision detector's pooled feature size
MODELS = {
    "bert": {"adapter": "bert_mlm", "weights": "random", "seed": 0, "device": "cpu",
             "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}},
    "visualbert": {**TINY["visualbert"], "detector": "frcnn-tiny",
                   "config": {**TINY["visualbert"]["config"], "visual_embedding_dim": FEATURES}},
    # VL-BERT end to end: its own region features from the pixels (the prec model reads 2048-d bottom-up
    # features, which this tiny detector does not give; tests/models/test_vlbert.py tests that path)
    "vlbert": {**E2E, "detector": "frcnn-tiny"},
    # FLAVA reads the pixels of the images the detector's store holds (the images every model reads)
    "flava": {**TINY_FLAVA, "detector": "frcnn-tiny"},
    # ViLT likewise reads the pixels; its "no image" a blank image masked out of the attention (no text-only input)
    "vilt": {**TINY_VILT, "detector": "frcnn-tiny"},
}
# (entity, gender, file, status): two purses with women, one with a man, a briefcase with a man (the
# detector dominates the run time, so few images)
IMAGES = [("purse", "female", "a.jpg", "ok"), ("purse", "female", "b.jpg", "ok"), ("purse", "male", "c.jpg", "ok"),
          ("briefcase", "male", "e.jpg", "ok"), ("briefcase", "male", "page.jpg", "ok"),
          ("apron", "female", "1.jpg", "missing")]


def write_images(root):
    rng = np.random.default_rng(0)
    lines = ["test\trole\tfile\turl\tstatus\treason\tpath"]
    for entity, gender, name, status in IMAGES:
        path = root / "images" / entity / gender / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "page.jpg":  # listed as ok, but an HTML page: the detector skips it with the reason
            path.write_text("<!DOCTYPE html><html>Not found</html>")
        elif status == "ok":
            Image.fromarray(rng.integers(0, 255, (40 + 4 * len(lines), 56, 3), dtype=np.uint8)).save(path)
        reason = "placeholder" if status != "ok" else ""
        lines.append("\t".join([entity, gender, name, "", status, reason,
                                str(path.relative_to(root)) if status == "ok" else ""]))
    (root / "images.tsv").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    config = make_project(root)
    write_images(root)
    # BridgeTower reads RoBERTa's byte-level BPE (its tokenizer key: a directory here)
    models = {**MODELS, "bridgetower": {**TINY_BRIDGETOWER, "detector": "frcnn-tiny",
                                        "tokenizer": tiny_bpe_tokenizer(root / "tokenizers/bpe")}}
    # one thread per job: the reference model's job runs beside the detector's
    config["regions"] = {"threads": 1, "detectors": {"frcnn-tiny": DETECTOR}, "manifests": {"cases": "images.tsv"},
                         "build": []}
    config["mlm"] = {"case_study": str(REPO / "resources/stimuli/mlm/case_study.yaml"),
                     "entities": str(REPO / "resources/stimuli/mlm/entities.yaml"),
                     "images": "cases", "reference": "bert", "models": models, "threads": 1, "build": []}
    write_yaml(root / "config/config.yaml", config)
    snakemake(root, "mlm_all")
    return root


def test_tables_and_figures_are_built(project):
    out = project / "results/mlm"
    for model in ("vlbert", "visualbert", "flava", "vilt", "bridgetower"):
        for table in ("scores", "bias", "contradictions", "entities"):
            assert all((out / model / f"{table}.{ext}").stat().st_size for ext in ("csv", "md", "tex", "html"))
        for figure in ("figure2", "figure3", "figure4", "figure5a", "figure5b"):
            with Image.open(out / model / f"{figure}.png") as im:
                assert im.format == "PNG"
    scores = pd.read_csv(out / "visualbert/scores.csv").set_index(["entity", "gender"])
    assert scores.loc[("purse", "female"), ["n_L", "n_V"]].tolist() == [3, 2]
    assert scores.loc[("briefcase", "male"), ["n_L", "n_V"]].tolist() == [1, 1]  # page.jpg has no regions
    assert scores.loc[("briefcase", "female"), ["n_L", "n_V"]].tolist() == [1, 0]
    assert np.isnan(scores.loc[("briefcase", "female"), "S_V"])
    assert scores["S_PT"].notna().all()
    assert scores.loc["apron", "S_L"].isna().all() and scores.loc["apron", "S_V"].isna().all()  # no images: n/a
    entities = pd.read_csv(out / "visualbert/entities.csv")
    assert len(entities) == 40
    np.testing.assert_allclose(entities["B_L_diff"], entities["B_L"] - entities["B_L_ref"], atol=1e-12)
    assert "n/a" in (out / "visualbert/scores.md").read_text()
    page = (out / "visualbert/scores.html").read_text()  # the report's page: the Markdown's rounded cells
    assert "<caption>Association scores S(E, g) of the case study" in page and "<td class=\"num\">n/a</td>" in page
    contra = (out / "visualbert/contradictions.md").read_text()
    assert "of 4 images: P_VL(contrast | person, I) > P_VL(entity | person, I)" in contra


def test_vlbert_reads_no_image_as_its_text_only_pre_training(project):
    rows = read_manifest(project / "results/mlm/logprobs/vlbert.tsv")
    info = next(c for c in (project / "results/mlm/logprobs/vlbert.tsv").read_text().splitlines()
                if c.startswith("# info:"))
    assert "text only" in info and len(rows) == 3 * 46 + 4 * 4
    scores = pd.read_csv(project / "results/mlm/vlbert/scores.csv").set_index(["entity", "gender"])
    assert scores.loc[("purse", "female"), ["n_L", "n_V"]].tolist() == [3, 2] and scores["S_PT"].notna().all()


def test_image_status_and_logprobs_on_record(project):
    status = {r["id"]: r for r in read_manifest(project / "results/mlm/logprobs/visualbert.images.tsv")}
    assert [status[f"purse/female/{f}"]["status"] for f in ("a.jpg", "b.jpg")] == ["used", "used"]
    assert status["briefcase/male/page.jpg"]["status"] == "no regions"
    assert "not an image" in status["briefcase/male/page.jpg"]["reason"]
    assert status["apron/female/1.jpg"]["status"] == "missing"
    rows = read_manifest(project / "results/mlm/logprobs/bert.tsv")
    assert {r["image"] for r in rows} == {""} and len(rows) == 3 * (6 + 40)  # text only, 3 agents
    assert {r["pieces"] for r in rows if r["entity"] == "handbag"} == {"hand ##bag"}
    vl = read_manifest(project / "results/mlm/logprobs/visualbert.tsv")
    # no image: 3 x 46; each of the 4 images: its entity with 3 agents and the contrast with "person"
    assert len(vl) == 3 * 46 + 4 * 4
    assert all(float(r["logprob"]) < 0 for r in vl)


def test_default_target_builds_only_what_build_lists(project):
    jobs = planned_jobs(project)
    assert not {"mlm_logprobs", "mlm_report"} & set(jobs)
    config = yaml.safe_load((project / "config/config.yaml").read_text())
    config["mlm"]["build"] = ["visualbert"]
    write_yaml(project / "config/config.yaml", config)
    try:
        (project / "results/mlm/visualbert/figure3.png").unlink()
        assert planned_jobs(project)["mlm_report"] == 1  # visualbert's; flava's are not in the default target
        config["mlm"]["build"] = ["bert"]
        write_yaml(project / "config/config.yaml", config)
        proc = snakemake(project, "--dry-run", check=False)
        assert proc.returncode != 0 and "mlm/build/0" in proc.stdout + proc.stderr
    finally:
        config["mlm"]["build"] = []
        write_yaml(project / "config/config.yaml", config)


def test_flava_reads_its_two_heads_on_the_same_images(project):
    path = project / "results/mlm/logprobs/flava.tsv"
    info = next(c for c in path.read_text().splitlines() if c.startswith("# info:"))
    assert '"no image": "mlm_head on the text encoder"' in info and '"image": "mmm_text_head' in info
    rows = read_manifest(path)
    assert len(rows) == 3 * 46 + 4 * 4 and all(float(r["logprob"]) < 0 for r in rows)
    status = {r["id"]: r["status"] for r in read_manifest(project / "results/mlm/logprobs/flava.images.tsv")}
    assert status == {r["id"]: r["status"] for r in read_manifest(project / "results/mlm/logprobs/visualbert.images.tsv")}
    scores = pd.read_csv(project / "results/mlm/flava/scores.csv").set_index(["entity", "gender"])
    assert scores.loc[("purse", "female"), ["n_L", "n_V"]].tolist() == [3, 2]
    assert scores["S_PT"].notna().all() and np.isfinite(scores.loc[("purse", "female"), "S_V"])


@pytest.mark.parametrize("model,architecture,unread", [
    ("vilt", "ViltForMaskedLM", "its tokens masked out of the attention"),
    ("bridgetower", "BridgeTowerForMaskedLM", "which the text's cross-attention does not read")])
def test_pixel_models_read_no_image_for_no_image(project, model, architecture, unread):
    path = project / f"results/mlm/logprobs/{model}.tsv"
    info = next(c for c in path.read_text().splitlines() if c.startswith("# info:"))
    assert '"no image": "mlm_score given a blank 32x32 image' in info and f'"architecture": "{architecture}"' in info
    assert f"), {unread}" in info  # no_image: masked, the default
    rows = read_manifest(path)
    assert len(rows) == 3 * 46 + 4 * 4 and all(float(r["logprob"]) < 0 for r in rows)
    status = {r["id"]: r["status"] for r in read_manifest(project / f"results/mlm/logprobs/{model}.images.tsv")}
    assert status == {r["id"]: r["status"] for r in read_manifest(project / "results/mlm/logprobs/visualbert.images.tsv")}
    scores = pd.read_csv(project / f"results/mlm/{model}/scores.csv").set_index(["entity", "gender"])
    assert scores.loc[("purse", "female"), ["n_L", "n_V"]].tolist() == [3, 2]
    assert scores["S_PT"].notna().all() and np.isfinite(scores.loc[("purse", "female"), "S_V"])
    if model == "bridgetower":  # its entities spelled after a space, by its byte-level BPE
        assert all(r["pieces"].startswith("Ġ") for r in rows)
