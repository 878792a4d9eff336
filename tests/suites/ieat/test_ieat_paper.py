"""The iEAT tables of Steed & Caliskan (2021) from the authors' published embeddings."""

from math import sqrt

import pandas as pd
import pytest

from helpers import REPO
from vlbias.associate import run_test
from vlbias.io.fetch import Source, read_manifest, sha256_file
from vlbias.io.stimuli import load_stimulus
from vlbias.report.formats import read_published
from vlbias.suites.ieat import published_store

IEAT = Source(repo="ryansteed/ieat", commit="4d7639bfd0b6c17b127ce163af0ddf985f5a6510", mirror_name="ieat")
MODEL_FILES = {"igpt": "igpt_l_32", "simclr": "simclr_152_3x_sk1", "igpt-logit": "igpt-logit_l_32"}
AUTHORS_SAMPLES = 10_000  # the authors' permutation samples (their weat.py default)


@pytest.fixture(scope="module")
def stores(mirror, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ieat")
    out = {}
    for model, file in MODEL_FILES.items():
        out[model] = tmp / f"{model}.h5"
        published_store(REPO / "resources/manifests/ieat_embeddings.tsv", file, IEAT, mirror,
                        tmp / "cache", out[model], {"model_id": file})
    return out


@pytest.fixture(scope="module")
def results(stores):
    published = read_published(REPO / "resources/published/ieat.tsv")
    rows = []
    for pub in published.to_dict("records"):
        stim = load_stimulus(REPO / f"resources/stimuli/ieat/{pub['test']}.yaml")
        ours = run_test(stim, stores[pub["model"]], pub["model"], n_samples=100_000, seed=0)
        rows.append({**ours, "d_paper": float(pub["d"]), "p_paper": pub["p"],
                     "n_t_paper": int(pub["n_t"]), "n_a_paper": int(pub["n_a"]), "table": pub["table"]})
    return pd.DataFrame(rows)


def test_every_published_number_is_checked(results):
    assert len(results) == 61
    assert set(results["table"]) == {"table1", "table2", "table3"}


def test_effect_sizes_equal_the_paper_to_two_decimals(results):
    off = results[(results["d"] - results["d_paper"]).abs() > 0.005 + 1e-12]
    assert off.empty, off[["table", "test", "model", "d", "d_paper"]].to_string()


def test_sample_sizes_equal_the_paper(results):
    assert (results["n_x"] == results["n_t_paper"]).all()
    assert (results["n_a"] == results["n_a_paper"]).all()


def test_p_values_agree_within_monte_carlo_error(results):
    bad = []
    for r in results.itertuples():
        # the paper's p: 10,000 sampled partitions, printed to two decimals or as a bound
        bound = r.p_paper.startswith("<")
        p_paper = float(r.p_paper.lstrip("<"))
        slack = 4 * sqrt(max(p_paper * (1 - p_paper), 1e-4) / AUTHORS_SAMPLES) + 4 * r.p_se
        ok = r.p <= p_paper + slack if bound else abs(r.p - p_paper) <= 0.005 + slack
        if not ok:
            bad.append((r.table, r.test, r.model, r.p, r.p_paper))
    assert not bad, bad


def test_image_manifest_matches_the_mirror(mirror):
    rows = read_manifest(REPO / "resources/manifests/ieat_images.tsv")
    missing = []
    for r in rows:
        path = mirror / "ieat/data/experiments" / r["category"] / r["file"]
        if not r["sha256"]:
            missing.append(r["file"])
            continue
        assert sha256_file(path) == r["sha256"], path
    # the one file absent from the mirror is listed without a checksum
    assert missing == ["professional2_google.jpg"]
    assert not (mirror / "ieat/data/experiments/gender/career/professional2_google.jpg").exists()


def test_published_vectors_keep_their_precision_and_give_the_authors_effect_sizes(stores, mirror):
    """The store holds the published numbers exactly (float64), so d equals the authors' formula on
    their own CSV values to 1e-9 (rounding them to float32 moved d by up to 1e-7)."""
    from vlbias.io.published import read_ieat_csv
    from vlbias.io.store import read_set
    from vlbias.stats import reference

    manifest = {(r["model_file"], r["category"]): r["path"] for r in read_manifest(
        REPO / "resources/manifests/ieat_embeddings.tsv")}
    worst = 0.0
    for test in ("gender-career", "race", "intersectional-valence-wmbm"):
        stim = load_stimulus(REPO / f"resources/stimuli/ieat/{test}.yaml")
        published = {}
        for s, st in stim.sets.items():
            raw, _ = read_ieat_csv(mirror / "ieat" / manifest[("igpt_l_32", st.category)])
            stored, _ = read_set(stores["igpt"], st.key)
            assert stored.dtype == "float64" and (stored == raw).all()
            published[s] = raw
        ours = run_test(stim, stores["igpt"], "igpt", n_samples=10, seed=0)["d"]
        worst = max(worst, abs(ours - reference.effect_size(*(published[s] for s in "XYAB"))))
    assert worst < 1e-9, worst
