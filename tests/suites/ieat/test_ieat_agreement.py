"""iGPT and SimCLRv2 embeddings recomputed from the stimulus images against the authors' published vectors.

Runs when the real weights are at hand (each model is skipped with its reason otherwise):
    VLBIAS_IGPT_MODEL        a local copy of openai/imagegpt-large (config.json, weights and
                             preprocessor_config.json with the colour clusters), or
                             ``openai/imagegpt-large@<commit>`` to download it
    VLBIAS_SIMCLR_CHECKPOINT r152_3x_sk1 converted (``python -m vlbias.models.simclr convert``) or the
                             SimCLRv2-Pytorch ``r152_3x_sk1.pth``
    VLBIAS_AGREEMENT_PER_CATEGORY  images per category (default 2: iGPT-L takes seconds an image on
                             a CPU; 0 = every image)
Each image is prepared as the authors' code did (cv2.imread, top-left square, OpenCV INTER_AREA) and
compared with its published vector by cosine similarity; the target is 0.999. An image left out is
counted by its reason, and only two reasons are real: absent from the mirror while the image manifest
has no checksum for it (absent upstream too), or a file OpenCV itself cannot decode.
"""

import os
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import REPO

from vlbias.images.decode import ImageDecodeError, prepare
from vlbias.io.fetch import read_manifest
from vlbias.io.published import read_ieat_csv
from vlbias import weights
from vlbias.models import build

pytestmark = pytest.mark.mirror
TARGET = 0.999


def _igpt(output):
    value = os.environ.get("VLBIAS_IGPT_MODEL")
    if not value:
        pytest.skip("set VLBIAS_IGPT_MODEL to a local copy of openai/imagegpt-large or "
                    "openai/imagegpt-large@<commit> (network)")
    where = {"path": value} if Path(value).is_dir() else dict(zip(("model_id", "revision"), value.split("@", 1)))
    return {"adapter": "igpt", **where, "output": output, **({"layer": 20} if output == "hidden" else {}),
            "batch_size": 8}


def _simclr():
    value = os.environ.get("VLBIAS_SIMCLR_CHECKPOINT")
    if not value:
        pytest.skip("set VLBIAS_SIMCLR_CHECKPOINT to the r152_3x_sk1 weights (converted, or SimCLRv2-Pytorch's .pth)")
    return {"adapter": "simclr", "depth": 152, "width": 3, "sk": 1, "checkpoint": value, "batch_size": 8}


MODELS = {"igpt_l_32": lambda: _igpt("hidden"), "igpt-logit_l_32": lambda: _igpt("logits"),
          "simclr_152_3x_sk1": _simclr}


@pytest.mark.parametrize("model_file", list(MODELS))
def test_recomputed_vectors_equal_the_published(model_file, mirror):
    # a hub id is fetched and verified first, into the repository's cache (no lock: a one-off
    # comparison), as every load of weights
    encoder = build(weights.prepare(f"ieat/{model_file}", MODELS[model_file](), cache=REPO / "results/cache"))
    size = encoder.n_px if model_file.startswith("igpt") else encoder.image_size
    per_category = int(os.environ.get("VLBIAS_AGREEMENT_PER_CATEGORY", "2"))
    cosines, left_out = {}, {}
    absent_upstream = {f"{r['category']}/{r['file']}" for r in read_manifest(
        REPO / "resources/manifests/ieat_images.tsv") if not r["sha256"]}
    for row in read_manifest(REPO / "resources/manifests/ieat_embeddings.tsv"):
        if row["model_file"] != model_file:
            continue
        published, names = read_ieat_csv(mirror / "ieat" / row["path"])
        take = range(len(names)) if per_category == 0 else range(min(per_category, len(names)))
        images, kept = [], []
        for i in take:
            key, path = f"{row['category']}/{names[i]}", mirror / "ieat/data/experiments" / row["category"] / names[i]
            if not path.exists():
                assert key in absent_upstream, f"{key}: absent from the mirror, but the image manifest has its sha256"
                left_out[key] = "absent upstream"
                continue
            try:
                images.append(prepare(path, size, crop="top-left", resample="area", decoder="opencv"))
                kept.append(i)
            except ImageDecodeError as e:
                assert cv2.imread(str(path)) is None, f"{key}: dropped ({e.reason}), but OpenCV decodes it"
                left_out[key] = e.reason
        if not kept:
            continue
        ours = encoder.encode_images(np.stack(images)).astype(np.float64)
        theirs = published[kept]
        cos = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
        cosines.update({f"{row['category']}/{names[i]}": c for i, c in zip(kept, cos)})
    values = np.array(list(cosines.values()))
    below = sorted((c, k) for k, c in cosines.items() if c < TARGET)
    print(f"{model_file}: {len(values)} images, cosine min {values.min():.5f}, median {np.median(values):.5f}; "
          f"below {TARGET}: {below[:20]}; left out: {dict(Counter(left_out.values()))} {sorted(left_out)}")
    # another OpenCV (libjpeg) than the authors' may decode a few files differently: at most 1% may miss
    assert len(below) <= 0.01 * len(values), below
