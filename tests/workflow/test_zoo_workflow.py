"""The encoder zoo through the real Snakefile on a tiny zoo: six tiny random open_clip architectures under
three made-up pretraining tags (`weights: random`), one model whose weights cannot be had (a failure
row, the rest built), one the accuracy table lacks (empty cells, a caption note), a cross-modal test in its
four orders with a stand-in for the OASIS images; eats, predictors and performance offline
(tests/helpers/zoo.py); a rerun has nothing to do."""

import pandas as pd
import pytest
from helpers.project import planned_jobs, snakemake
from helpers.zoo import CROSS_MODAL, MODELS, TARGETS, TEXT_TEST, make_zoo

from vlbias.suites.zoo.metadata import COLUMNS

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo-project")
    make_zoo(root)
    snakemake(root, *TARGETS)
    return root


def test_eats_has_a_row_per_model_and_test_beside_its_metadata(project):
    eats = pd.read_csv(project / "results/zoo/eats.csv")
    names = [m["name"] for m in MODELS] + ["broken"]
    assert list(dict.fromkeys(eats["model"])) == names
    orders = ("image-text", "text-image", "image-image", "text-text")
    assert len(eats) == len(names) * 7 and set(eats["test"]) == {
        "flower-insect", "insect-flower", TEXT_TEST, *(f"{CROSS_MODAL}:{order}" for order in orders)}
    ok = eats[eats["model"] != "broken"]
    assert (ok["status"] == "ok").all() and ok["d"].abs().le(2).all()
    # Ghate et al.'s text test on each model's text tower, and the cross-modal orders: each its own n
    n = {"flower-insect": (5, 4), "insect-flower": (5, 4), TEXT_TEST: (3, 3), f"{CROSS_MODAL}:image-text": (5, 3),
         f"{CROSS_MODAL}:text-image": (3, 25), f"{CROSS_MODAL}:image-image": (5, 25), f"{CROSS_MODAL}:text-text": (3, 3)}
    assert {t: (rows["n_x"].iloc[0], rows["n_a"].iloc[0]) for t, rows in ok.groupby("test")} == n
    assert set(ok.loc[ok["test"] == TEXT_TEST, "order"]) == {"text-text"}
    assert ok.loc[ok["test"] == TEXT_TEST, "d"].nunique() == len(MODELS)  # each model's own vectors
    assert (project / "results/zoo/oasis/manifest.tsv").read_text().count("\tok\t") == 50
    assert set(COLUMNS) <= set(eats.columns)
    m0 = eats[eats["model"] == "m0"].iloc[0]
    assert (m0.dataset, m0.curation, m0.samples_seen, m0.embed_dim, m0.image_size) == ("ToyWeb", "web-scraped", 13e6, 8, 16)
    assert m0.params == m0.image_params + m0.text_params and m0.imagenet == pytest.approx(0.1)
    # Holm within each model: its seven tests
    for _, rows in ok.groupby("model"):
        assert rows["p_holm"].tolist() == pytest.approx(sorted_holm(rows["p"].tolist()))
    # the failed fetch: a row per test saying why, the rest built
    broken = eats[eats["model"] == "broken"]
    assert broken["status"].str.startswith("failed: weights not fetched").all() and broken["d"].isna().all()
    # the model the accuracy table lacks: empty cells, named in the caption's note
    assert eats.loc[eats["model"] == "m5", ["imagenet", "average38"]].isna().all().all()
    assert "No downstream accuracy for 2 model(s)" in (project / "results/zoo/eats.md").read_text()


def sorted_holm(p):
    from vlbias.stats.adjust import holm

    return list(holm(pd.Series(p).to_numpy()))


def test_predictors_and_performance_are_built(project):
    predictors = pd.read_csv(project / "results/zoo/predictors.csv")
    pooled = predictors[predictors["scope"] == "pooled"]
    assert {"C(dataset)", "log_params", "log_samples", "C(test)"} <= set(pooled.loc[pooled["kind"] == "anova", "term"])
    assert pooled["n_models"].iloc[0] == 42  # six models, seven tests
    performance = pd.read_csv(project / "results/zoo/performance.csv")
    assert set(performance["n_models"]) == {5} and len(performance) == 7 * 2 * 2
    for png in ("predictors", "performance"):
        assert (project / f"results/zoo/{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "m5" in (project / "results/zoo/performance.md").read_text()


def test_a_rerun_has_nothing_to_do(project):
    assert planned_jobs(project, *TARGETS) == {}
