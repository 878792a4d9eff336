"""The tiny grounded project (tests/suites/grounded, tests/suites/test_plan.py, the TSV region stores):
grounded stimulus files of two pairs per set, their images in a mirror (one missing), tiny random
models of the paper's four families and of the extended tables, tiny detectors; on ``make_project``'s."""

import json

import h5py
import numpy as np
import yaml
from PIL import Image

from helpers.project import make_project, write_yaml
from helpers.tiny import TINY_BLIP, TINY_BRIDGETOWER, TINY_FLAVA, TINY_VILT, tiny_bpe_tokenizer

from vlbias.suites.grounded.stimulus import ROLES

# VisualBERT and LXMERT of one layer per stream on 16-d region features
TINY_GROUNDED = {
    "visualbert": {"adapter": "visualbert", "weights": "random", "seed": 0, "device": "cpu", "batch_size": 4,
                   "config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                              "intermediate_size": 37, "visual_embedding_dim": 16}},
    "lxmert": {"adapter": "lxmert", "weights": "random", "seed": 0, "device": "cpu", "batch_size": 4,
               "config": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 37, "l_layers": 1,
                          "x_layers": 1, "r_layers": 1, "num_qa_labels": 10, "visual_feat_dim": 16}},
}
WORDS = ["John", "Paul", "Amy", "Lisa", "career", "office", "home", "family"]
CAPTIONS = {
    "word": {"X": ["John", "Paul"], "Y": ["Amy", "Lisa"], "A": ["career", "office"], "B": ["home", "family"]},
    "sentence": {"X": ["John is at work.", "This is Paul."], "Y": ["Amy is at work.", "This is Lisa."],
                 # "A building." names none of the test's words: dropped at C and T, kept at W and S
                 "A": ["A career in an office.", "A building."], "B": ["A family at home.", "This is home."]},
}
FOLDERS = {"X": "targ1", "Y": "targ2", "A_x": "attr1", "A_y": "attr1", "B_x": "attr2", "B_y": "attr2"}


def stimulus_doc(test_id, dataset="google", levels=("word", "sentence")):
    """A tiny grounded stimulus (the schema of resources/stimuli/grounded): two images per set."""
    def level(name):
        images = {r: {"pairs": {f"{r.lower()}{i}.jpg": [i] for i in range(2)}} for r in ROLES}
        if dataset == "google":
            for r in ROLES:
                images[r]["role"] = FOLDERS[r]
        return {"upstream": "toy", "embeddings": [name], "dataset_dir": test_id if dataset == "google" else None,
                "contextual_words": WORDS, "mask": {"tokens": WORDS + [w.lower() for w in WORDS[:4]],
                                                   "region_labels": ["person"]},
                "captions": CAPTIONS[name], "images": images}
    return {"id": test_id, "name": f"Toy {test_id}", "suite": "grounded", "dataset": dataset, "source": "toy",
            **{s: {"label": s} for s in "XYAB"}, "levels": {lv: level(lv) for lv in levels}}


def write_stimulus(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def image_ids(doc):
    return sorted({f"{lv['dataset_dir'] or doc['id']}/{lv['images'][r].get('role', r)}/{f}"
                   for lv in doc["levels"].values() for r in ROLES for f in lv["images"][r]["pairs"]})


DETECTOR = {"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 2, "max_boxes": 4,
            "conf": 0.5, "min_size": 32, "max_size": 48, "batch_size": 4, "device": "cpu"}
# a few printed cells of the toy tests, in the transcription's format (resources/published/grounded_tables.tsv)
PRINTED = """table	half	test	label	experiment	level	mask	model	dataset	quantity	value	significant
table3	Gender	toy-a	Toy A	1	W		VisualBERT	google	d	0.57	
table5	Race	toy-b	Toy B	3-masked	S	I	VisualBERT	google	d	–	
table5	Race	toy-b	Toy B	3-masked	S	I	LXMERT	google	d	-0.12	no
table7	Gender			1	S		LXMERT	google	count	1	
"""


def project_doc(test_id):
    """The stimulus of ``tiny_project``'s test: one image of both captions per set, as the google tests
    pair an image with several captions (B_y two, one of them missing from toy-b's mirror): 7 images per
    test, not 12 (every model and detector job's image work)."""
    doc = stimulus_doc(test_id)
    for level in doc["levels"].values():
        for role, spec in level["images"].items():
            if role != "B_y":
                spec["pairs"] = {f"{role.lower()}0.jpg": [0, 1]}
    return doc


def tiny_project(root):
    """Two google tests (project_doc), their images in a mirror (one missing), tiny random models and detector."""
    config = make_project(root)
    rng = np.random.default_rng(1)
    manifest = []
    for test in ("toy-a", "toy-b"):
        doc = project_doc(test)
        write_stimulus(root / f"resources/stimuli/grounded/google/{test}.yaml", doc)
        for image_id in image_ids(doc):
            if image_id != "toy-b/attr2/b_y1.jpg":  # not in the mirror: a failed image
                path = root / "mirror/grounded/data/google-images" / image_id
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(path)
            manifest.append((*image_id.split("/"), f"http://x/{image_id}", ""))
    (root / "resources/manifests/google.tsv").write_text(
        "test\trole\tfile\turl\tsha256\n" + "".join("\t".join(r) + "\n" for r in manifest))
    models = {name: {**spec, "config": {**spec["config"], TINY_FEATURE_KEY[name]: 1024}, "detector": "frcnn-tiny",
                     "column": {"visualbert": "VisualBERT", "lxmert": "LXMERT"}[name]}
              for name, spec in TINY_GROUNDED.items()}
    # ViLBERT and VL-BERT (end to end: region features from the image's pixels) fill the other two columns
    # (ViLBERT on 36 boxes: the authors' loader reads no fewer, protocol switch vilbert_image_mask, row 9)
    models["vilbert"] = {**TINY_VILBERT, "config": {**TINY_VILBERT["config"], "v_feature_size": 1024},
                         "detector": "frcnn-tiny-36", "column": "ViLBERT", "mask_region_labels": ["person"]}
    models["vlbert"] = {**TINY_VLBERT_E2E, "detector": "frcnn-tiny", "column": "VL-BERT"}
    # the authors' VisualBERT: its own weights and detector (protocol switch visualbert, row 1; ViLBERT's 36
    # boxes, not the paper VisualBERT's: one detector job fewer)
    models["visualbert-authors"] = {**models["visualbert"], "seed": 1, "detector": "frcnn-tiny-36",
                                    "visualbert": "authors", "image_feature_cap": 2}
    models["visualbert"]["visualbert"] = "paper"
    # the extended tables' columns: BLIP (pixels; mask I the pixel fill of the detector's person boxes) and a
    # dual encoder, whose cells say n/a (no embedding job)
    models["blip"] = {**TINY_BLIP, "batch_size": 4, "detector": "frcnn-tiny", "column": "BLIP"}
    models["flava"] = {**TINY_FLAVA, "batch_size": 4, "detector": "frcnn-tiny", "column": "FLAVA"}
    # ViLT and BridgeTower (pixels, as FLAVA; BridgeTower with a tiny RoBERTa-style tokenizer)
    models["vilt"] = {**TINY_VILT, "batch_size": 4, "detector": "frcnn-tiny", "column": "ViLT"}
    models["bridgetower"] = {**TINY_BRIDGETOWER, "batch_size": 4, "detector": "frcnn-tiny", "column": "BridgeTower",
                             "tokenizer": tiny_bpe_tokenizer(root / "tokenizers/bpe")}
    models["clip"] = {"adapter": "open_clip", "arch": "ViT-B-32", "weights": "random", "column": "CLIP"}
    groups = {"Gender": ["toy-a"], "Race": ["toy-b"]}
    config["grounded"] = {
        "images": {"datasets": {"google": {"manifest": "resources/manifests/google.tsv",
                                           "mirror_dir": "data/google-images"}},
                   "download": {"workers": 2, "timeout": 1, "retries": 0, "backoff": 0.01, "max_mb": 1}},
        "table1": {"published": "resources/published/grounded_table1.tsv"},
        "stimuli": "resources/stimuli/grounded", "levels": ["W", "S", "C"], "masks": {"T": ["S"], "I": ["S"]},
        "published": "resources/published/grounded_tables.tsv",
        "protocols": {"authors": "authors", "paper": "paper"}, "protocol": "authors",
        "models": models,
        "experiments": {"build": True, "models": ["visualbert", "visualbert-authors", "vilbert", "lxmert", "vlbert"],
                        "threads": 1},
        "extended": {"models": ["blip", "flava", "vilt", "bridgetower", "clip"],
                     "datasets": {"BLIP": "google", "FLAVA": "google", "ViLT": "google", "BridgeTower": "google"}},
        "tables": {"table3": {"dataset": "google", "groups": groups},
                   "table4": {"dataset": "google", "groups": groups},
                   "table5": {"dataset": "google", "groups": groups, "level": "S"},
                   # the paper's COCO / Conceptual Captions table, here on the toy google test (ViLBERT:
                   # a dataset not configured: an empty column)
                   "table6": {"datasets": {"VisualBERT": "google", "LXMERT": "google", "ViLBERT": "concap",
                                           "VL-BERT": "google"},
                              "groups": {"Gender": ["toy-a"]}, "experiments": ["1", "2", "3-masked"]},
                   "table7": {"dataset": "google", "groups": groups, "experiments": ["1", "2", "3-masked"]}},
    }
    (root / "resources/published/grounded_table1.tsv").parent.mkdir(parents=True, exist_ok=True)
    (root / "resources/published/grounded_table1.tsv").write_text(
        "dataset\tpaper_test\ttests\tn_images\ngoogle\tToy A\ttoy-a\t7\ngoogle\tToy B\ttoy-b\t7\n")
    (root / "resources/published/grounded_tables.tsv").write_text(PRINTED)
    config["stats"]["n_samples"] = 200
    # one torch thread, as the embedding jobs: a second one only spins while the other core is busy
    config["regions"] = {"threads": 1, "detectors": {"frcnn-tiny": DETECTOR,
                                                     "frcnn-tiny-36": {**DETECTOR, "min_boxes": 36, "max_boxes": 36,
                                                                       "conf": 0.0, "nms_thresh": 1.0}},
                         "build": []}
    write_yaml(root / "config/config.yaml", config)


TINY_FEATURE_KEY = {"visualbert": "visual_embedding_dim", "lxmert": "visual_feat_dim"}
TINY_VILBERT = {"adapter": "vilbert", "weights": "random", "seed": 0, "device": "cpu", "batch_size": 4,
                "config": {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 37,
                           "v_hidden_size": 24, "v_num_hidden_layers": 2, "v_num_attention_heads": 2,
                           "v_intermediate_size": 29, "bi_hidden_size": 16, "bi_num_attention_heads": 4,
                           "v_biattention_id": [0, 1], "t_biattention_id": [1, 2], "v_target_size": 11}}
TINY_VLBERT_E2E = {"adapter": "vlbert", "weights": "random", "seed": 0, "device": "cpu", "batch_size": 4,
                   "scales": [48, 80], "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                                  "intermediate_size": 37, "visual_region_classes": 11,
                                                  "image_feat_precomputed": False}}


def write_grounded(path, sets, column="LXMERT", dataset="google", tests=None):
    """An embed_tests file (vlbias.suites.grounded.jobs) of one test 'toy' at level S, unmasked; ``tests``:
    {test: {level: sets}} instead."""
    with h5py.File(path, "w") as f:
        f.attrs.update({"protocol": "authors", "dataset": dataset, "model": "lxmert", "column": column,
                        "model_id": "tiny", "revision": "r", "detector": "frcnn", "info": json.dumps({})})
        for test, levels in (tests or {"toy": {"S": sets}}).items():
            t = f.create_group(test)
            t.attrs.update({"test": test, "name": test.title()})
            for level, level_sets in levels.items():
                for role, v in level_sets.items():
                    t.create_group(f"{level}/none/{role}").create_dataset("embeddings", data=v)
    return path


def per_group_vectors(encoder, stimuli, levels, masks, visual):
    """{(test, level, mask, role): float32 (n, dim)} of every pair the embedding job plans, one ``embed``
    call per (test, level, mask, role), the pairs in the stimulus' order: the job's path before its calls
    were filled across groups, the reference its vectors are bit-compared with.
    ``visual(image id)``: the pair's regions entry."""
    from vlbias.suites.grounded.jobs import LEVEL_SOURCE, NO_MASK, embedding_combos, plan_pairs

    combos, _ = embedding_combos(levels, masks, encoder.supports_image_masking)
    out = {}
    for s in stimuli:
        for level, mask in combos:
            terms = s.levels[LEVEL_SOURCE[level]]["mask"]["tokens"] if mask == "T" else None
            for role, rows in plan_pairs(s, level, mask, set(s.image_ids()), str)[0].items():
                out[(s.id, level, mask or NO_MASK, role)] = encoder.embed(
                    [c for c, *_ in rows], [visual(i) for _, i, _ in rows], level, mask=mask, mask_terms=terms,
                    words=[span for *_, span in rows] if level == "C" else None)
    return out
