"""Retrieval skew (vlbias.stats.skew): MaxSkew@k, MinSkew@k and NDKL@k on hand-computed rankings, the two
tie rules, the permutation null and the bootstrap on planted and absent skew, and the differential test
against Berg et al.'s own functions (oxai/debias-vision-lang, debias_clip/measuring_bias.py)."""

from math import log, log2

import numpy as np
import pytest
from helpers import checkout, functions_of

from vlbias.errors import UsageError
from vlbias.stats.skew import _measures, _ranked, cosine_scores, image_to_text_scores, skew_measures, skew_summary

REFERENCE = ("a checkout of oxai/debias-vision-lang (f481bded; Berg et al., AACL 2022), e.g. "
             "`git --git-dir=<clone> archive f481bded | tar x -C <dir>`")


def test_skew_and_ndkl_on_a_hand_ranked_query():
    scores = [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]]
    labels = [0, 0, 1, 0, 1, 1]
    found = skew_measures(scores, labels, 2, [2, 3])
    # k=2: both of value 0; value 1 absent reads as one image in k (p = 1/2), their code's rule
    assert found[2]["skew"][0] == pytest.approx([log(1 / 0.5), log(0.5 / 0.5)])
    assert found[2]["max_skew"][0] == pytest.approx(log(2))
    # k=3: p = (2/3, 1/3) against 1/2 each
    assert found[3]["skew"][0] == pytest.approx([log(4 / 3), log(2 / 3)])
    assert found[3]["min_skew"][0] == pytest.approx(log(2 / 3))
    kl = [log(2), log(2), 2 / 3 * log(4 / 3) + 1 / 3 * log(2 / 3)]  # the top 1, 2, 3 against (1/2, 1/2)
    ndkl = sum(v / log2(i + 2) for i, v in enumerate(kl)) / sum(1 / log2(i + 2) for i in range(3))
    assert found[3]["ndkl"][0] == pytest.approx(ndkl)


def test_population_desired_distribution():
    found = skew_measures([[0.4, 0.3, 0.2, 0.9]], [0, 0, 0, 1], 2, [2], desired="population")
    # top 2: images 3 and 0, one of each value, against the set's (3/4, 1/4)
    assert found[2]["skew"][0] == pytest.approx([log(0.5 / 0.75), log(0.5 / 0.25)])


def test_ties_at_the_kth_similarity():
    scores, labels = [[0.9, 0.5, 0.5, 0.1]], [0, 1, 0, 1]
    # their code: both images tied at the 2nd similarity are in, counts (2, 1) still over k = 2
    assert skew_measures(scores, labels, 2, [2], ties="all")[2]["skew"][0] == pytest.approx([log(2), 0])
    # the prose: exactly 2, the lower index first: one of each
    assert skew_measures(scores, labels, 2, [2], ties="first")[2]["skew"][0] == pytest.approx([0, 0])
    # NDKL over the three ranks of the tied set, Z over k = 2
    kl = [log(2), 0, 2 / 3 * log(4 / 3) + 1 / 3 * log(2 / 3)]
    z = 1 + 1 / log2(3)
    assert skew_measures(scores, labels, 2, [2])[2]["ndkl"][0] == pytest.approx(
        sum(v / log2(i + 2) for i, v in enumerate(kl)) / z)


def test_a_resample_ranks_as_its_sorted_copy():
    rng = np.random.default_rng(3)
    scores, codes = rng.normal(size=(4, 30)), rng.integers(0, 3, 30)
    idx = rng.integers(0, 30, 30)
    weights = np.bincount(idx, minlength=30)
    order = np.argsort(-scores, axis=1, kind="stable")
    d = np.full(3, 1 / 3)
    for ties in ("all", "first"):
        top, sizes = _ranked(scores, order, [1, 5, 12], ties, weights)
        resampled = _measures(top, sizes, codes, d, [1, 5, 12])
        direct = skew_measures(scores[:, idx], codes[idx], 3, [1, 5, 12], ties=ties)
        for k in (1, 5, 12):
            for m in ("skew", "ndkl"):
                np.testing.assert_allclose(resampled[k][m], direct[k][m], err_msg=f"{ties} k={k} {m}")


def _planted(strength, seed=0, n=120, dim=16):
    """A labelled set of unit image vectors: noise plus ``strength`` along a direction per value; the query
    is value 0's direction."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    directions = np.eye(dim)[:2]
    images = rng.normal(size=(n, dim)) + strength * 3 * directions[labels]
    return cosine_scores(directions[:1] + 0.1 * rng.normal(size=(3, dim)), images), labels


def test_planted_skew_stands_above_the_null_and_its_control_inside():
    ks = [10, 40]
    # the control is one fixed draw: at a 5% level one of its six (k, measure) may fall outside by chance
    for strength, seed, above in ((1.0, 0, True), (0.0, 2, False)):
        summary, _ = skew_summary(*_planted(strength, seed), 2, ks, n_permutations=200, n_bootstrap=100, seed=1)
        for row in summary:
            beyond = -row.value if row.measure == "min_skew" else row.value  # MinSkew's skew is downward
            bound = -row.null_bound if row.measure == "min_skew" else row.null_bound
            if above:
                assert beyond > bound and row.p < 0.01, row
                assert row.low <= row.value <= row.high, row
                assert row.measure != "ndkl" or row.low < row.high, row  # resampled images move NDKL
            else:
                assert beyond <= bound and row.p > 0.05, row


def test_image_to_text_ranks_by_each_images_zero_shot_probability():
    cos = np.array([[0.3, 0.1], [0.2, 0.25]])  # 2 queries x 2 images
    p = image_to_text_scores(cos, 100.0)
    np.testing.assert_allclose(p.sum(axis=0), 1)
    assert p[0, 0] == pytest.approx(1 / (1 + np.exp(-10)))  # image 0: query 0 by 0.1 x 100
    assert p[1, 1] == pytest.approx(1 / (1 + np.exp(-15)))


@pytest.mark.parametrize("call, message", [
    (lambda: skew_measures([[1, 2]], [0, 1], 2, [3]), "k 3: between 1 and the 2 images"),
    (lambda: skew_measures([[1, 2]], [0, 0], 1, [1]), "at least two values"),
    (lambda: skew_measures([[1, 2]], [0, 2], 2, [1]), "codes 0..1"),
    (lambda: skew_measures([[1, 2]], [0, 1], 2, [1], ties="some"), "ties 'some'"),
    (lambda: skew_measures([[1, 2]], [0, 1], 2, [1], desired="fair"), "desired 'fair'"),
])
def test_bad_settings(call, message):
    with pytest.raises(UsageError, match=message):
        call()


def berg_functions(root):
    """Berg et al.'s two measures and their per-prompt mean, their own code (measuring_bias.py: its dataset and
    model imports need gdown and their CLIP fork, so only these functions run)."""
    return functions_of(root / "debias_clip" / "measuring_bias.py",
                        ["normalized_discounted_KL", "compute_skew_metrics", "eval_ranking"],
                        "import math\nfrom collections import Counter, defaultdict\nfrom typing import Union\n"
                        "import numpy as np\nimport pandas as pd\nimport torch\nfrom tqdm import tqdm")


def test_against_berg_et_al_measuring_bias():
    root = checkout("VLBIAS_DEBIAS_VISION_LANG_REFERENCE", REFERENCE, "debias_clip/measuring_bias.py")
    pd, torch = pytest.importorskip("pandas"), pytest.importorskip("torch")
    ref = berg_functions(root)
    rng = np.random.default_rng(7)
    images, texts = rng.normal(size=(300, 24)), rng.normal(size=(6, 24))
    images = images / np.linalg.norm(images, axis=1, keepdims=True)
    texts = texts / np.linalg.norm(texts, axis=1, keepdims=True)
    scores = np.round(cosine_scores(texts, images), 2)  # rounded: ties at the k-th similarity, their keep="all"
    for n_values in (2, 7):
        labels = rng.integers(0, n_values, 300)
        for k in (10, 100, 300):
            for desired, theirs in (("equal", "eq_opp"), ("population", "dem_par")):
                ours = skew_measures(scores, labels, n_values, [k], desired=desired)[k]
                for q in range(len(scores)):
                    df = pd.DataFrame({"score": scores[q], "label": labels})
                    skew = ref["compute_skew_metrics"](df, k)
                    ndkl = ref["normalized_discounted_KL"](df, k)
                    assert ours["max_skew"][q] == pytest.approx(skew[f"maxskew_{theirs}"], abs=1e-12), (k, q)
                    assert ours["ndkl"][q] == pytest.approx(ndkl[f"ndkl_{theirs}"], abs=1e-12), (k, q)
            # their per-prompt mean, on the tensors their pipeline hands it
            mean = ref["eval_ranking"](labels, torch.tensor(images), torch.tensor(texts), "maxskew", k)
            ours = skew_measures(cosine_scores(texts, images), labels, n_values, [k])[k]
            assert ours["max_skew"].mean() == pytest.approx(mean["eq_opp"], abs=1e-6)

