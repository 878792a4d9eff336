import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tiny randomly initialised vision-language models of the real layouts (the real bert-base-uncased
# vocabulary): ViLBERT with co-attention after language layers 1 and 2, before vision layers 0 and 1,
# so both streams also end with layers of their own; VL-BERT with precomputed features.
TINY_VL = {
    "visualbert": {"adapter": "visualbert", "weights": "random", "seed": 0, "device": "cpu",
                   "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                              "intermediate_size": 37}},
    "lxmert": {"adapter": "lxmert", "weights": "random", "seed": 0, "device": "cpu",
               "config": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 37,
                          "l_layers": 2, "x_layers": 1, "r_layers": 1, "num_qa_labels": 10}},
    "vilbert": {"adapter": "vilbert", "weights": "random", "seed": 0, "device": "cpu",
                "config": {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2,
                           "intermediate_size": 37, "v_hidden_size": 24, "v_num_hidden_layers": 2,
                           "v_num_attention_heads": 2, "v_intermediate_size": 29, "bi_hidden_size": 16,
                           "bi_num_attention_heads": 4, "v_biattention_id": [0, 1], "t_biattention_id": [1, 2],
                           "v_target_size": 11}},
    "vlbert": {"adapter": "vlbert", "weights": "random", "seed": 0, "device": "cpu",
               "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                          "intermediate_size": 37, "visual_region_classes": 11}},
}


# What the tiny vision-language models are fed (tests/test_vl_models.py, test_vilbert.py, test_vlbert.py):
# captions with a multi-piece name, a long sentence and a single word, and the word of each for level C
VL_CAPTIONS = ["Lakisha is a nurse.", "A man rides a horse across a wide field near the old farm.", "woman"]
VL_WORDS = ["Lakisha", "man", "woman"]


def random_visual(k, seed, persons=(), size=(48, 64), image=False, num_classes=None):
    """(Visual, float32 (k, 4) pixel boxes) of k random regions of an image of ``size`` (height, width):
    boxes x1 <= x2, y1 <= y2 inside it, 2048-d standard-normal features, ``persons`` the indices
    flagged is_person; with ``image`` random pixels, with ``num_classes`` random class ids."""
    import numpy as np

    from vlbias.visual import Visual

    rng = np.random.default_rng(seed)
    h, w = size
    xy = np.sort(rng.random((k, 2, 2)), axis=1) * [w, h]  # [:, 0] <= [:, 1]
    pixels = np.stack([xy[:, 0, 0], xy[:, 0, 1], xy[:, 1, 0], xy[:, 1, 1]], axis=1).astype(np.float32)
    class_ids = rng.integers(0, num_classes, k) if num_classes else None
    features = rng.standard_normal((k, 2048)).astype(np.float32)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8) if image else None
    return Visual(features, (pixels / [w, h, w, h]).astype(np.float32), np.isin(np.arange(k), persons), size, rgb,
                  class_ids), pixels


# A tiny random BLIP retrieval model (vlbias.models.blip; not in TINY_VL: it has no masked-language head):
# a 32-pixel ViT of 8-pixel patches under a 2-layer text encoder with cross-attention
TINY_BLIP = {"adapter": "blip", "weights": "random", "seed": 0, "device": "cpu",
             "config": {"text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                        "intermediate_size": 37, "encoder_hidden_size": 24},
                        "vision_config": {"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
                                          "intermediate_size": 29, "image_size": 32, "patch_size": 8},
                        "image_text_hidden_size": 16}}

# A tiny random FLAVA (vlbias.models.flava): text, image and multimodal encoders of two layers, all 32 wide
# (FlavaForPreTraining's heads read the multimodal states with the text and image widths), 32x32 images of 2x2
# patches, a small image vocabulary (its masked-image heads)
TINY_FLAVA = {"adapter": "flava", "weights": "random", "seed": 0, "device": "cpu",
              "config": {"hidden_size": 32, "projection_dim": 16,
                         "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                         "intermediate_size": 37},
                         "image_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                          "intermediate_size": 29, "image_size": 32, "patch_size": 16, "vocab_size": 64},
                         "multimodal_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                               "intermediate_size": 41}}}

# A tiny random ViLT (vlbias.models.vilt): one 2-layer stream 32 wide, 32-pixel images (shorter side) of 16-pixel patches
TINY_VILT = {"adapter": "vilt", "weights": "random", "seed": 0, "device": "cpu",
             "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
                        "image_size": 32, "patch_size": 16}}


# A tiny random BridgeTower (vlbias.models.bridgetower): 2 text and vision layers and one cross-modal layer, all
# 32 wide (the vision tower 64: one head per 64 channels), 32x32 images of 16-pixel patches; its RoBERTa-style tokenizer is tiny_bpe_tokenizer's (vocab_size 400)
TINY_BRIDGETOWER = {"adapter": "bridgetower", "weights": "random", "seed": 0, "device": "cpu",
                    "config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                               "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                               "intermediate_size": 37, "vocab_size": 400,
                                               "max_position_embeddings": 66},
                               "vision_config": {"hidden_size": 64, "num_hidden_layers": 2, "image_size": 32,
                                                 "patch_size": 16}}}


def tiny_bpe_tokenizer(folder):
    """``folder`` holding a RoBERTa tokenizer (byte-level BPE, <s> <pad> </s> <unk> <mask> as ids 0-4, <mask>
    taking the space before it, as roberta-base's) of 400 entries, trained on the shipped MLM stimuli and a
    few captions: a stand-in for BridgeTower's roberta-base tokenizer, which no package ships."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import RobertaTokenizer

    corpus = [(REPO / "resources/stimuli/mlm" / name).read_text() for name in ("case_study.yaml", "entities.yaml")]
    corpus += ["Lakisha is a nurse.", "A man rides a horse across a wide field near the old farm."]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=400, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    vocab = bpe.get_vocab()
    merges = [tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]
    tokenizer = RobertaTokenizer(vocab=vocab, merges=merges, mask_token=AddedToken("<mask>", lstrip=True))
    assert len(tokenizer) == 400
    tokenizer.save_pretrained(folder)
    return str(folder)

@pytest.fixture(scope="session")
def mirror():
    """The local data mirror (VLBIAS_MIRROR, else ../shared/data beside the repository)."""
    path = Path(os.environ.get("VLBIAS_MIRROR", REPO.parent / "shared" / "data"))
    if not (path / "ieat").is_dir():
        pytest.skip(f"needs the local data mirror of the upstream repositories; {path} is absent "
                    "(set VLBIAS_MIRROR to a copy laid out like shared/data)")
    return path


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node SLURM cluster (tests/slurm/up.sh): ``env`` is os.environ with SLURM_CONF
    set, for srun, sbatch and snakemake; ``snakemake_args`` what the SLURM executor plugin needs on
    this cluster (no accounting: job status from squeue; a short wait before the first check)."""

    dir: Path
    env: dict
    snakemake_args: tuple = ("--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2")


@pytest.fixture(scope="session")
def slurm_cluster():
    """Bring up a one-node SLURM cluster for the session and stop its daemons afterwards; skip
    with the reason where it cannot be had (not root, packages not installable, daemons failing)."""
    # not under pytest's base temp: that is private to its owner, and munged runs as user munge
    root = Path(tempfile.mkdtemp(prefix="vlbias-slurm-"))
    try:
        up = subprocess.run([REPO / "tests/slurm/up.sh", root], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        subprocess.run([REPO / "tests/slurm/down.sh", root], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip("no SLURM cluster: tests/slurm/up.sh took more than 15 minutes")
    if up.returncode != 0:
        reason = " ".join(line for line in up.stderr.splitlines() if line.startswith("up.sh:"))
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"no SLURM cluster here: {reason or up.stderr.strip()[-500:]}")
    try:
        yield SlurmCluster(root, {**os.environ, "SLURM_CONF": str(root / "slurm.conf")})
    finally:
        subprocess.run([REPO / "tests/slurm/down.sh", root], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium (tests/browser.py) to render HTML as a reader sees it; skips without one."""
    from browser import Browser

    found = Browser.find()
    if found is None:
        pytest.skip("needs a headless Chromium (Debian: apt-get install -y chromium)")
    return found


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # tests never reach a model hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # the loopback test server must be reached directly whatever proxy the environment names
    monkeypatch.setenv("no_proxy", "*")


@pytest.fixture
def hub(monkeypatch):
    """The loopback Hugging Face hub (tests/hub.py), with huggingface_hub pointed at it and online
    (the ``offline`` fixture turns it offline)."""
    from huggingface_hub import constants

    from hub import Hub

    server = Hub().start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # restored after localize sets them
        monkeypatch.setenv(key, "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield server
    server.stop()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server API
        path = urlsplit(self.path).path.lstrip("/")
        name = path if path in self.server.routes else path.rsplit("/", 1)[-1]
        self.server.requests[name] += 1
        route = self.server.routes.get(name)
        if route is None:
            self.reply(404, b"not here")
        elif callable(route):
            route(self)
        elif isinstance(route, tuple):
            self.reply(*route)
        else:
            self.reply(200, route)

    def reply(self, code, body, headers=()):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class LoopbackServer(ThreadingHTTPServer):
    """HTTP on 127.0.0.1. ``routes`` maps a request's path (without the leading "/"), else its last
    path component, to its answer: bytes (200 with that body), a tuple (code, body[, headers]) or a
    callable taking the request handler (which has ``reply(code, body, headers=())``); anything else
    is a 404. ``requests`` counts the requests per route key (the last component when none matched)."""

    block_on_close = False  # do not wait for a deliberately slow handler on shutdown

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes, self.requests = {}, Counter()

    def url(self, path):
        return f"http://127.0.0.1:{self.server_address[1]}/{path}"

    def handle_error(self, request, client_address):
        pass  # a client that hung up on a slow endpoint: expected


@pytest.fixture(scope="module")
def http_server():
    """A :class:`LoopbackServer` for one test module; the module adds its ``routes``."""
    srv = LoopbackServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def assert_batch_independent(encoder, captions, regions, cases, batch_size):
    """A VL encoder's embeddings of ``captions`` with ``regions`` are the same in one batch of
    ``batch_size`` and one by one, for each (level, keyword arguments) of ``cases``."""
    import numpy as np

    try:
        for level, kwargs in cases:
            encoder.batch_size = batch_size
            together = encoder.embed(captions, regions, level, **kwargs)
            encoder.batch_size = 1
            alone = encoder.embed(captions, regions, level, **kwargs)
            np.testing.assert_allclose(together, alone, atol=1e-5, err_msg=f"{level} {kwargs}")
    finally:
        encoder.batch_size = 32
