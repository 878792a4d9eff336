"""The tiny zoo the zoo's workflow and SLURM tests run (tests/workflow/test_zoo_workflow.py,
tests/slurm/test_cluster.py): six tiny random open_clip architectures under three made-up datasets
(`weights: random`), one model whose weights cannot be had, one the accuracy table lacks, on
make_project's iEAT stimuli and images; one cross-modal test in its four orders, its valence images a
stand-in for the OASIS download."""

import copy
import hashlib
import json

from helpers.project import COMMIT, make_project, write_yaml

# three made-up datasets, each under tags of two sample counts
DATASETS = {"toyweb_*": ("ToyWeb", "web-scraped", 13000000), "toyclip_*": ("ToyClip", "CLIP-filtered", 1000),
            "toyprop_*": ("ToyProp", "proprietary", "")}
TEXT = {"context_length": 8, "width": 16, "heads": 2, "layers": 1}  # OpenAI's tokenizer: its 49408 ids


def tiny(name, tag, width, layers, patch, seed):
    return {"name": name, "tag": tag, "adapter": "open_clip", "arch": f"zoo-{name}", "weights": "random", "seed": seed,
            "batch_size": 8, "model_cfg": {"embed_dim": 8, "text_cfg": TEXT, "vision_cfg": {
                "image_size": 16, "layers": layers, "width": width, "patch_size": patch, "head_width": 8}}}


MODELS = [tiny(f"m{i}", tag, width, layers, patch, i) for i, (tag, width, layers, patch) in enumerate([
    ("toyweb_s13m_b4k", 16, 1, 8), ("toyweb_s26m_b4k", 24, 1, 4), ("toyclip_s128m_b4k", 16, 2, 8),
    ("toyclip_s64m_b4k", 32, 1, 8), ("toyprop_s1b_b8k", 16, 1, 4), ("toyprop_s2b_b8k", 24, 2, 8)])]
# a checkpoint that is not there: its weights cannot be fetched
BROKEN = {"name": "broken", "tag": "toyweb_s13m_b4k", "adapter": "open_clip", "arch": "RN50",
          "checkpoint": "models/absent.safetensors"}


def make_zoo(root):
    config = make_project(root)
    # the zoo reads the iEAT stimuli and images alone: the project's tables are left unbuilt
    config["ieat"]["specificity"]["models"], config["ieat"]["build_images"] = [], False
    config["stats"] |= {"n_samples": 200, "ci": None, "mleat": {"build": False}}
    (root / "resources/zoo").mkdir(parents=True)
    (root / "resources/zoo/datasets.tsv").write_text("tag\tarch\tdataset\tpairs\tcuration\tsource\n" + "".join(
        f"{tag}\t*\t{name}\t{pairs}\t{kind}\tmade up for the test\n" for tag, (name, kind, pairs) in DATASETS.items()))
    # m5 is not in the accuracy table
    (root / "accuracy.csv").write_text("name,pretrained,ImageNet 1k,Average perf. on 38 datasets\n" + "".join(
        f"{m['arch']},{m['tag']},{0.1 + i / 20},{0.2 + i / 30}\n" for i, m in enumerate(MODELS[:5])))
    # the toy iEAT categories as targets, the text test's words and the OASIS stand-in's images as attributes
    (root / "cross_modal.tsv").write_text(f"test\timage_x\timage_y\ttext_test\n{CROSS_MODAL}\ttoy/flower\ttoy/insect\t"
                                          f"{TEXT_TEST}\n")
    manifest = write_oasis(root / "oasis/OASIS", [(f"Theme {i}", 1 + (i * 7) % 52 / 10) for i in range(52)])
    config["zoo"] = {"models": copy.deepcopy([*MODELS, BROKEN]), "accuracy": "accuracy.csv",
                     "bootstrap": {"n_boot": 50}, "text_tests": [TEXT_TEST], "text_manifest": "text_tests.tsv",
                     "cross_modal": "cross_modal.tsv",
                     "oasis": {"folder": "oasis/OASIS", "manifest": str(manifest.relative_to(root))}}
    # one of Ghate et al.'s text tests, in the mirror beside its manifest
    jsonl = root / "mirror/clip_bias/data/tests_seat/toy.jsonl"
    jsonl.parent.mkdir(parents=True)
    jsonl.write_text(json.dumps({key: {"category": key, "examples": [f"{key} {w}" for w in words]}
                                 for key, words in TEXT_SETS.items()}))
    (root / "text_tests.tsv").write_text("name\tpath\tsha256\n"
                                         f"{TEXT_TEST}\tdata/tests_seat/toy.jsonl\t{hashlib.sha256(jsonl.read_bytes()).hexdigest()}\n")
    config["sources"]["clip_bias"] = {"repo": "kshitishghate/CLIP_bias", "commit": COMMIT, "mirror_name": "clip_bias"}
    write_yaml(root / "config/config.yaml", config)
    return config


def write_oasis(folder, ratings):
    """A stand-in for the OASIS download (a licensed set): OASIS.csv in its layout (an unnamed id column
    first), a small JPEG per theme under Images/, and beside the folder a manifest of their sha256;
    ``ratings``: [(theme, mean valence)] in the file's order. Returns the manifest."""
    import numpy as np
    from PIL import Image

    (folder / "Images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    lines = ['"","Theme","Category","Source","Valence_mean","Valence_SD","Valence_N"']
    for i, (theme, valence) in enumerate(ratings):
        lines.append(f'"I{i + 1}","{theme}","Object","Pixabay",{valence},1.2,100')
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(folder / f"Images/{theme}.jpg")
    (folder / "OASIS.csv").write_text("\n".join(lines) + "\n")
    files = ["OASIS.csv", *(f"Images/{theme}.jpg" for theme, _ in ratings)]
    manifest = folder.parent / f"{folder.name}.tsv"
    manifest.write_text("path\tsha256\n" + "".join(f"{f}\t{hashlib.sha256((folder / f).read_bytes()).hexdigest()}\n"
                                                   for f in files))
    return manifest


TEXT_TEST = "seat:toy"
CROSS_MODAL = "Flower/Valence"
TEXT_SETS = {"targ1": ["rose", "tulip", "daisy"], "targ2": ["ant", "wasp", "moth"], "attr1": ["joy", "love", "peace"],
             "attr2": ["hate", "pain", "war"]}

# what it builds: the zoo's three tables
TARGETS = ["results/zoo/eats.csv", "results/zoo/predictors.csv", "results/zoo/performance.csv"]
GROUP_SIZE = 4  # embedding jobs to a cluster job in the SLURM test (--group-components zoo-embed=4): 7 models, 2 jobs
