"""COCO and Conceptual Captions images: manifests from the stimulus files, id resolution, flat mirrors."""

import io
import zlib

import pytest
import yaml
from PIL import Image

from helpers import REPO
from helpers.project import make_project, snakemake, write_yaml
from vlbias.errors import InputError
from vlbias.images.acquire import MANIFEST_COLUMNS, acquire, image_id
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.suites.grounded import sources
from vlbias.suites.grounded.sources import (STIMULUS_PREFIX, coco_manifest, coco_url, concap_id, concap_manifest,
                                            read_concap_validation)
from vlbias.suites.grounded.stimulus import load_grounded_stimulus

STIMULI = REPO / "resources/stimuli/grounded"
COMMITTED = REPO / "resources/manifests/grounded_coco_images.tsv"


def stimulus_digests(path):
    """The "<dataset>/<test> <sha256>" lines recorded in a manifest's header."""
    with open(path, encoding="utf-8") as f:
        return [line[2 + len(STIMULUS_PREFIX):].strip() for line in f if line.startswith("# " + STIMULUS_PREFIX)]
# two URLs with one crc32 (found by search): the authors' id cannot tell which image was meant
COLLIDING = ("http://img.example/c/29685295.jpg", "http://img.example/c/32060020.jpg")


def jpeg(colour):
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), colour).save(buf, format="JPEG")
    return buf.getvalue()


def test_coco_rows_from_a_stimulus_are_its_image_ids():
    rows, digests, unresolved = coco_manifest(STIMULI / "coco")
    assert not unresolved and [d.split()[0] for d in digests] == ["coco/occ_gender", "coco/weat6", "coco/weat8"]
    weat6 = [r for r in rows if r["test"] == "weat6"]
    assert weat6[0] == {"test": "weat6", "role": "X", "file": "COCO_val2014_000000410554.jpg", "sha256": "",
                        "url": "http://images.cocodataset.org/val2014/COCO_val2014_000000410554.jpg"}
    # one row per (image set, file) over both levels: the acquisition ids are the stimulus' ids
    stimulus = load_grounded_stimulus(STIMULI / "coco/weat6.yaml")
    assert sorted(image_id(r) for r in weat6) == stimulus.image_ids()
    assert len(weat6) == 274 and len({r["file"] for r in weat6}) == 271  # 3 images in two sets
    assert coco_url("COCO_train2014_000000000009.jpg") is None and coco_url("2783726446") is None


def test_committed_coco_manifest_is_a_fresh_build_of_the_committed_stimuli():
    rows, digests, _ = coco_manifest(STIMULI / "coco")
    assert read_manifest(COMMITTED) == rows
    assert stimulus_digests(COMMITTED) == digests


def test_concap_ids_are_the_crc32_of_the_validation_url(tmp_path):
    url = "http://example.com/a/b.jpg?x=1"
    assert concap_id(url) == str(zlib.crc32(url.encode("utf-8")) & 0xFFFFFFFF)
    assert int(concap_id("https://\u00e9.example/\u00fc.jpg")) < 2**32  # unsigned, UTF-8
    tsv = tmp_path / "val.tsv"
    tsv.write_text(f"a cat\t{url}\nthe same cat\t{url}\r\n\nx\t{COLLIDING[0]}\ny\t{COLLIDING[1]}\n", encoding="utf-8")
    urls, ambiguous = read_concap_validation(tsv)
    assert urls[concap_id(url)] == url  # a URL repeated for another caption is one image
    assert ambiguous == {concap_id(COLLIDING[0]): sorted(COLLIDING)}
    tsv.write_text("a caption without a url\n")
    with pytest.raises(InputError, match="val.tsv: line 1: expected caption<TAB>http"):
        read_concap_validation(tsv)


def concap_stimuli(tmp_path):
    """The committed concap weat6 and weat8 with synthetic image URLs: weat6's ids renamed to the
    crc32 of made-up URLs (all but the first two of X), weat8 as committed (COCO file names)."""
    doc = yaml.safe_load((STIMULI / "concap/weat6.yaml").read_text())
    urls, lines = {}, []
    for level in doc["levels"].values():
        for role, images in level["images"].items():
            renamed = {}
            for i, (old, idx) in enumerate(images["pairs"].items()):
                if role == "X" and i < 2:
                    renamed[old] = idx  # not in the validation TSV
                    continue
                url = urls.setdefault(old, f"http://img.example/{old}.jpg")
                renamed[concap_id(url)] = idx
            images["pairs"] = renamed
    for old, url in urls.items():
        lines += [f"caption of {old}\t{url}", f"another caption\t{url}"]  # every URL twice
    lines.append(f"unrelated\t{COLLIDING[0]}\nunrelated\t{COLLIDING[1]}")
    write_yaml(tmp_path / "concap/weat6.yaml", doc)
    (tmp_path / "concap/weat8.yaml").write_text((STIMULI / "concap/weat8.yaml").read_text())
    (tmp_path / "val.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path / "concap", tmp_path / "val.tsv", urls


def test_concap_manifest_resolves_ids_and_reports_the_unmatched(tmp_path):
    stimuli, tsv, urls = concap_stimuli(tmp_path)
    rows, digests, unresolved, ambiguous = concap_manifest(stimuli, tsv)
    assert [d.split()[0] for d in digests] == ["concap/weat6", "concap/weat8"]
    weat6 = [r for r in rows if r["test"] == "weat6"]
    assert sorted(image_id(r) for r in weat6) == load_grounded_stimulus(stimuli / "weat6.yaml").image_ids()
    assert {r["url"] for r in weat6} - {""} <= set(urls.values())
    assert [(r["test"], r["role"]) for r in unresolved] == [("weat6", "X")] * 2
    assert ambiguous == {concap_id(COLLIDING[0]): sorted(COLLIDING)}
    # upstream's concap/weat8 names COCO val2014 images: they resolve as COCO's
    weat8 = [r for r in rows if r["test"] == "weat8"]
    assert weat8 and all(r["url"] == coco_url(r["file"]) for r in weat8)


def test_concap_entry_point_reads_the_tsv_from_a_path_or_a_url(tmp_path, http_server, capsys):
    stimuli, tsv, _ = concap_stimuli(tmp_path)
    out = tmp_path / "local.tsv"
    assert sources._main(["concap", str(stimuli), "--validation", str(tsv), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("no URL found; kept with an empty url") == 2 and "is the crc32 of 2 URLs" in err
    assert list(read_manifest(out)[0]) == MANIFEST_COLUMNS
    http_server.routes["GCC-1.1.0-Validation.tsv"] = tsv.read_bytes()
    fetched = tmp_path / "fetched.tsv"
    url = http_server.url("GCC-1.1.0-Validation.tsv")
    assert sources._main(["concap", str(stimuli), "--validation", url, "-o", str(fetched)]) == 0
    assert read_manifest(fetched) == read_manifest(out)
    assert any(url in line for line in fetched.read_text().splitlines() if line.startswith("#"))
    assert sources._main(["concap", str(stimuli), "--validation", str(tmp_path / "absent.tsv"),
                          "-o", str(tmp_path / "x.tsv")]) == 1
    assert "absent.tsv: no such file" in capsys.readouterr().err and not (tmp_path / "x.tsv").exists()


def test_flat_mirror_is_the_datasets_own_folder(tmp_path):
    val2014 = tmp_path / "mirror/coco/val2014"
    val2014.mkdir(parents=True)
    (val2014 / "COCO_val2014_000000000001.jpg").write_bytes(jpeg((200, 0, 0)))
    rows = [{"test": t, "role": r, "file": f, "url": coco_url(f), "sha256": ""} for t, r, f in
            [("weat6", "X", "COCO_val2014_000000000001.jpg"), ("weat8", "A_x", "COCO_val2014_000000000001.jpg"),
             ("weat6", "Y", "COCO_val2014_000000000002.jpg")]]
    status = acquire(rows, tmp_path / "cache", mirror=val2014, mirror_layout="flat", workers=2)
    assert [s["status"] for s in status] == ["ok", "ok", "failed"]
    assert status[1]["reason"] == "duplicate of weat6/X/COCO_val2014_000000000001.jpg"
    assert status[2]["reason"] == f"not in mirror {val2014}/COCO_val2014_000000000002.jpg"
    assert (tmp_path / "cache/weat8/A_x/COCO_val2014_000000000001.jpg").is_file()
    # a mirror without the dataset's folder: every image is a recorded failure, nothing stops
    status = acquire(rows, tmp_path / "cache2", mirror=tmp_path / "mirror/absent", mirror_layout="flat")
    assert {s["reason"].split(" ")[0] for s in status} == {"not"}
    with pytest.raises(InputError, match="mirror_layout 'tree': must be 'tests' or 'flat'"):
        acquire(rows, tmp_path / "cache", mirror=val2014, mirror_layout="tree")


@pytest.mark.workflow
def test_workflow_reads_coco_from_a_flat_mirror(tmp_path):
    config = make_project(tmp_path)
    val2014 = tmp_path / "mirror/coco/val2014"
    val2014.mkdir(parents=True)
    (val2014 / "COCO_val2014_000000000001.jpg").write_bytes(jpeg((0, 200, 0)))
    rows = [{"test": "weat6", "role": r, "file": f"COCO_val2014_00000000000{i}.jpg", "sha256": "",
             "url": coco_url(f"COCO_val2014_00000000000{i}.jpg")} for r, i in (("X", 1), ("Y", 2))]
    write_manifest(tmp_path / "resources/manifests/coco.tsv", rows, MANIFEST_COLUMNS)
    (tmp_path / "resources/published").mkdir(parents=True)
    (tmp_path / "resources/published/table1.tsv").write_text(
        "dataset\tpaper_test\ttests\tn_images\ncoco\tC6: M/W, Career/Family\tweat6\t254\n")
    config["grounded"] = {
        "images": {"datasets": {"coco": {"manifest": "resources/manifests/coco.tsv", "source": None,
                                         "mirror_dir": "coco/val2014", "mirror_layout": "flat"}}},
        "table1": {"published": "resources/published/table1.tsv"}}
    write_yaml(tmp_path / "config/config.yaml", config)
    snakemake(tmp_path, "results/grounded/table1.csv")
    status = read_manifest(tmp_path / "results/images/grounded/coco/manifest.tsv")
    assert [(s["status"], s["path"]) for s in status] == [
        ("ok", "results/cache/coco/val2014/weat6/X/COCO_val2014_000000000001.jpg"), ("failed", "")]
    assert status[1]["reason"] == f"not in mirror {val2014.resolve()}/COCO_val2014_000000000002.jpg"
    assert 'coco,"C6: M/W, Career/Family",weat6,2,1,0,254' in (tmp_path / "results/grounded/table1.csv").read_text()
