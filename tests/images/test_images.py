"""Image decoding, cropping and the HDF5 image store; every fixture is made here with Pillow."""

from contextlib import nullcontext

import cv2
import h5py
import numpy as np
import pytest
from helpers import REPO
from PIL import Image, ImageFile

from vlbias.errors import InputError
from vlbias.images import store
from vlbias.images.decode import (
    ImageDecodeError,
    area_resize,
    load_rgb,
    load_rgb_opencv,
    prepare,
    square_crop,
)
from vlbias.images.store import build_image_store
from vlbias.io.fetch import read_manifest, sha256_file

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def close(pixel, colour, tol=12):
    return np.all(np.abs(np.asarray(pixel, dtype=int) - colour) <= tol)


def solid(path, colour=RED, size=(16, 16), **save):
    Image.new("RGB", size, colour).save(path, **save)
    return path


# -- formats and modes ---------------------------------------------------------------------------


@pytest.mark.parametrize("load", [load_rgb, load_rgb_opencv])
def test_exif_orientation_6_is_rotated_upright(tmp_path, load):
    # stored landscape, red in the stored top-left; orientation 6 = turn 90 degrees clockwise
    stored = np.zeros((32, 64, 3), np.uint8)
    stored[:] = BLUE
    stored[:16, :16] = RED
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "portrait.jpg"
    Image.fromarray(stored).save(path, quality=95, exif=exif.tobytes())
    img = np.asarray(load(path))
    assert img.shape == (64, 32, 3)  # portrait once upright
    assert close(img[4, -4], RED)  # the stored top-left is now the top-right
    assert close(img[4, 4], BLUE) and close(img[-4, -4], BLUE)


def test_palette_png_with_transparency_becomes_white(tmp_path):
    im = Image.new("P", (4, 2), 0)
    im.putpalette([*RED, *GREEN] + [0] * (3 * 254))
    im.paste(1, (2, 0, 4, 2))
    path = tmp_path / "p.png"
    im.save(path, transparency=0)
    img = np.asarray(load_rgb(path))
    assert img.dtype == np.uint8 and img.shape == (2, 4, 3)
    assert (img[:, :2] == WHITE).all() and (img[:, 2:] == GREEN).all()


def test_cmyk_jpeg(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(path, quality=95)
    with Image.open(path) as im:
        assert im.mode == "CMYK"
    img = load_rgb(path)
    assert img.mode == "RGB" and close(img.getpixel((8, 8)), RED)


def test_rgba_png_alpha_over_white(tmp_path):
    a = np.zeros((1, 3, 4), np.uint8)
    a[0, 0] = (0, 0, 0, 0)  # transparent black → white
    a[0, 1] = (255, 0, 0, 255)  # opaque red stays red
    a[0, 2] = (0, 0, 0, 128)  # half-transparent black → mid grey
    path = tmp_path / "rgba.png"
    Image.fromarray(a, "RGBA").save(path)
    img = np.asarray(load_rgb(path))
    assert (img[0, 0] == WHITE).all() and (img[0, 1] == RED).all()
    assert close(img[0, 2], (127, 127, 127), tol=1)


def test_16_bit_grayscale_png_is_scaled_not_clipped(tmp_path):
    path = tmp_path / "gray16.png"
    Image.fromarray(np.array([[0, 128 * 257, 65535]], np.uint16)).save(path)
    with Image.open(path) as im:
        assert im.mode == "I;16"
    img = np.asarray(load_rgb(path))
    assert img[0, :, 0].tolist() == [0, 128, 255] and (img[..., 0] == img[..., 2]).all()


def test_animated_gif_first_frame(tmp_path):
    path = tmp_path / "anim.gif"
    frames = [Image.new("RGB", (8, 8), c) for c in (RED, GREEN, BLUE)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    with Image.open(path) as im:
        assert im.n_frames == 3
    assert (np.asarray(load_rgb(path)) == RED).all()


def test_animated_webp_first_frame(tmp_path):
    path = tmp_path / "anim.webp"
    frames = [Image.new("RGB", (8, 8), c) for c in (GREEN, BLUE)]
    frames[0].save(path, save_all=True, append_images=frames[1:], lossless=True)
    assert (np.asarray(load_rgb(path)) == GREEN).all()


@pytest.mark.parametrize("name, options", [("x.webp", {"lossless": True}), ("x.bmp", {}), ("x.png", {})])
def test_lossless_formats_exact(tmp_path, name, options):
    a = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    path = tmp_path / name
    Image.fromarray(a).save(path, **options)
    assert (np.asarray(load_rgb(path)) == a).all()


def test_grayscale_jpeg(tmp_path):
    path = tmp_path / "l.jpg"
    Image.new("L", (8, 8), 200).save(path, quality=95)
    assert close(np.asarray(load_rgb(path))[4, 4], (200, 200, 200), tol=2)


def test_content_decides_not_extension(tmp_path):
    path = solid(tmp_path / "really_a_png.jpg", GREEN, format="PNG")
    assert (np.asarray(load_rgb(path)) == GREEN).all()


# -- what is not an image ------------------------------------------------------------------------


def test_truncated_jpeg_is_rejected(tmp_path):
    path = tmp_path / "cut.jpg"
    noise = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(path, quality=90)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageDecodeError, match="truncated image data") as e:
        load_rgb(path)
    assert str(path) in str(e.value) and isinstance(e.value, InputError)


def test_refuses_to_run_with_truncated_images_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        load_rgb(solid(tmp_path / "ok.png"))


def test_truncated_png_is_rejected(tmp_path):
    path = tmp_path / "cut.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)
    path.write_bytes(path.read_bytes()[:-2000])
    with pytest.raises(ImageDecodeError, match=r"cut\.png: truncated"):
        load_rgb(path)


def test_html_saved_as_jpg(tmp_path):
    path = tmp_path / "dead_link.jpg"
    path.write_text("\n<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>\n")
    with pytest.raises(ImageDecodeError, match=r"dead_link\.jpg: not an image \(looks like HTML"):
        load_rgb(path)


@pytest.mark.parametrize("content, reason", [
    (b"", "empty file"),
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 12\n", "Git LFS pointer"),
    (b"just some words\n", "looks like text"),
    (b"\x00\x01\x02\xff" * 40, "unknown format"),
])
def test_other_non_images(tmp_path, content, reason):
    path = tmp_path / "x.jpg"
    path.write_bytes(content)
    with pytest.raises(ImageDecodeError, match=reason) as e:
        load_rgb(path)
    assert e.value.source == str(path)


def test_missing_file(tmp_path):
    with pytest.raises(ImageDecodeError, match="cannot read file"):
        load_rgb(tmp_path / "absent.png")


@pytest.mark.parametrize("size", [(11, 10), (30, 30)])  # Pillow warns above the limit, fails above twice it
def test_decompression_bomb(tmp_path, monkeypatch, size):
    path = solid(tmp_path / "big.png", size=size)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.warns(Image.DecompressionBombWarning) if size == (11, 10) else nullcontext():
        with pytest.raises(ImageDecodeError, match="image too large"):
            load_rgb(path)


# -- the iEAT authors' decoder: cv2.imread ------------------------------------------------------


def test_opencv_keeps_the_stored_colours_of_transparent_pixels(tmp_path):
    a = np.zeros((1, 3, 4), np.uint8)
    a[0, 0] = (0, 255, 0, 0)  # transparent green: OpenCV drops alpha and keeps green, Pillow's path gives white
    a[0, 1] = (255, 0, 0, 255)
    a[0, 2] = (0, 0, 255, 128)
    path = tmp_path / "rgba.png"
    Image.fromarray(a, "RGBA").save(path)
    img = load_rgb_opencv(path)
    assert img.dtype == np.uint8 and img.shape == (1, 3, 3)
    assert img[0].tolist() == [list(GREEN), list(RED), list(BLUE)]  # RGB, not OpenCV's BGR
    assert (np.asarray(load_rgb(path))[0, 0] == WHITE).all()


def test_opencv_refuses_what_is_not_a_whole_image(tmp_path):
    path = tmp_path / "cut.jpg"
    noise = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    # an end-of-image marker before the scan too (in a comment here; an EXIF thumbnail's, in the wild)
    Image.fromarray(noise).save(path, quality=90, comment=b"\xff\xd9")
    path.write_bytes(path.read_bytes()[:3000])  # libjpeg would pad it with grey
    with pytest.raises(ImageDecodeError, match=r"cut\.jpg: truncated image data"):
        load_rgb_opencv(path)
    cut = tmp_path / "cut.png"  # OpenCV itself refuses a truncated PNG
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(cut)
    cut.write_bytes(cut.read_bytes()[:-2000])
    with pytest.raises(ImageDecodeError, match=r"cut\.png: OpenCV cannot decode this PNG image"):
        load_rgb_opencv(cut)
    page = tmp_path / "dead_link.jpg"
    page.write_text("<!DOCTYPE html><html></html>")
    with pytest.raises(ImageDecodeError, match="looks like HTML"):
        prepare(page, 8, decoder="opencv")
    with pytest.raises(ImageDecodeError, match="cannot read file"):
        load_rgb_opencv(tmp_path / "absent.png")


def test_an_image_opencv_cannot_decode_is_named(tmp_path, monkeypatch):
    path = solid(tmp_path / "x.png")
    monkeypatch.setattr(cv2, "imread", lambda *a: None)  # what imread returns for a format it lacks
    with pytest.raises(ImageDecodeError, match=r"x\.png: OpenCV cannot decode this PNG image \(damaged"):
        load_rgb_opencv(path)


def authors_resize(path, *sizes):
    """ryansteed/ieat ieat/utils.py ``resize`` at each of ``sizes``: imread, BGR -> RGB, the top-left
    square, INTER_AREA."""
    img = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    d = min(img.shape[:2])
    return [cv2.resize(img[:d, :d], (n, n), interpolation=cv2.INTER_AREA) for n in sizes]


@pytest.mark.parametrize("size", [8, 23, 64])  # shrinking, a fractional factor, enlarging
def test_prepare_as_the_authors_resize(tmp_path, size):
    path = tmp_path / "a.png"
    a = np.random.default_rng(3).integers(0, 256, (30, 45, 4), dtype=np.uint8)
    a[..., 3] = np.where(a[..., 3] < 128, 0, 255)  # transparent pixels keep their colours
    Image.fromarray(a, "RGBA").save(path)
    ours = prepare(path, size, crop="top-left", resample="area", decoder="opencv")
    assert ours.shape == (size, size, 3)
    np.testing.assert_array_equal(ours, authors_resize(path, size)[0])
    build_image_store([{"category": "c", "file": "a.png", "path": path}], tmp_path / "s.h5", size, crop="top-left",
                      resample="area", decoder="opencv")
    with h5py.File(tmp_path / "s.h5", "r") as f:
        np.testing.assert_array_equal(f["c/pixels"][0], ours)
    with pytest.raises(ValueError, match="unknown decoder 'cv3'"):
        prepare(path, size, decoder="cv3")


@pytest.mark.mirror
def test_image_stores_equal_the_authors_pixels_on_every_mirror_image(tmp_path, mirror):
    """Every listed iEAT image of the mirror at 32 and 224 px: our stores (decoder opencv, top-left, area)
    against the authors' resize computed with cv2 here; only an image absent from the mirror is left out."""
    root = mirror / "ieat/data/experiments"
    rows = read_manifest(REPO / "resources/manifests/ieat_images.tsv")
    entries = [{"category": r["category"], "file": r["file"],
                "path": root / r["category"] / r["file"] if (root / r["category"] / r["file"]).is_file() else None,
                "reason": "absent from the mirror"} for r in rows]
    present = [e for e in entries if e["path"]]
    assert len(present) >= 825
    stores = {}
    for size in (32, 224):
        status = build_image_store(entries, tmp_path / f"{size}.h5", size, crop="top-left", resample="area",
                                   decoder="opencv")
        assert [r["file"] for r in status if r["status"] != "ok"] == [e["file"] for e in entries if not e["path"]]
        with h5py.File(tmp_path / f"{size}.h5", "r") as f:
            assert f.attrs["decoder"] == "opencv" and f.attrs["n_images"] == len(present)
            stores[size] = {(c, i.decode()): p for c in {e["category"] for e in entries}
                            for i, p in zip(f[c]["ids"][()], f[c]["pixels"][()])}
    differ = []
    for e in present:
        for size, theirs in zip((32, 224), authors_resize(e["path"], 32, 224)):
            if not np.array_equal(stores[size][e["category"], e["file"]], theirs):
                differ.append(f"{size}px {e['category']}/{e['file']}")
    print(f"{len(present)} images in the 32 px and 224 px stores; differing from OpenCV's pixels: {differ}")
    assert not differ


# -- crop and prepare ----------------------------------------------------------------------------


def asymmetric(w, h):
    """Pixel (x, y) = (10x, 10y, 7): every pixel tells where it came from."""
    y, x = np.mgrid[:h, :w]
    return Image.fromarray(np.stack([10 * x, 10 * y, np.full_like(x, 7)], -1).astype(np.uint8))


def test_square_crop_center_and_top_left():
    wide, tall = asymmetric(5, 3), asymmetric(3, 6)
    c, t = np.asarray(square_crop(wide, "center")), np.asarray(square_crop(wide))
    assert (c == t).all() and c.shape == (3, 3, 3)
    assert c[0, :, 0].tolist() == [10, 20, 30] and c[:, 0, 1].tolist() == [0, 10, 20]
    tl = np.asarray(square_crop(wide, "top-left"))
    assert tl[0, :, 0].tolist() == [0, 10, 20] and (tl == np.asarray(wide)[:3, :3]).all()
    c = np.asarray(square_crop(tall, "center"))
    assert c[:, 0, 1].tolist() == [10, 20, 30] and c[0, :, 0].tolist() == [0, 10, 20]
    assert (np.asarray(square_crop(tall, "top-left")) == np.asarray(tall)[:3, :3]).all()
    with pytest.raises(ValueError, match="unknown crop mode 'middle'"):
        square_crop(wide, "middle")


def test_prepare(tmp_path):
    half = np.zeros((20, 40, 3), np.uint8)
    half[:, 20:] = 255  # left half black, right half white
    path = tmp_path / "half.png"
    Image.fromarray(half).save(path)
    c, t = prepare(path, 8), prepare(path, 8, crop="top-left")
    assert c.dtype == np.uint8 and c.shape == (8, 8, 3)
    assert (t == 0).all()  # the top-left square is all black
    assert (c[:, 0] == 0).all() and (c[:, -1] == 255).all()  # the centre square straddles the edge
    assert (prepare(solid(tmp_path / "g.png", GREEN, size=(30, 17)), 5) == GREEN).all()
    with pytest.raises(ValueError, match="crop"):
        prepare(path, 8, crop="bottom")


# -- area resizing (OpenCV's INTER_AREA, as the iEAT authors resized) ------------------------------


def test_area_resize_whole_factors_by_hand():
    x = np.zeros((1, 4, 4, 3), np.uint8)
    x[0, :2, :2, 0] = [[1, 2], [1, 2]]  # block sum 6: 1.5, rounded up in OpenCV's 2x2 case
    x[0, :2, 2:, 0] = [[1, 1], [0, 1]]  # 0.75 -> 1
    assert area_resize(x, 2)[0, :, :, 0].tolist() == [[2, 1], [0, 0]]
    y = np.zeros((8, 8, 3), np.uint8)
    y[:4, :4][np.indices((4, 4)).sum(0) % 2 == 0] = 1  # mean 0.5 over a 4x4 block: rounded to even, 0
    y[:4, 4:] = 3
    y[4:, :4][:2] = 3  # mean 1.5 -> 2
    assert area_resize(y, 2)[:, :, 1].tolist() == [[0, 3], [2, 0]]


def test_area_resize_fractional_factor_by_hand():
    # 3 -> 2 pixels: output 0 covers source [0, 1.5), output 1 [1.5, 3), each weighted by its overlap
    x = np.array([[[0] * 3, [90] * 3, [30] * 3]] * 3, np.uint8)  # columns 0, 90, 30; rows equal
    out = area_resize(x, 2)
    assert out.shape == (2, 2, 3)
    assert out[0, :, 0].tolist() == [30, 50]  # (0 + 0.5 * 90) / 1.5 = 30, (0.5 * 90 + 30) / 1.5 = 50
    assert (out[0] == out[1]).all()
    with pytest.raises(ValueError, match="only shrinks"):
        area_resize(x, 4)


def test_area_resize_edge_threshold_by_hand():
    # 225 -> 224 pixels, s = 225/224: output 0 covers source [0, s), so pixel 1 only 1/224 of it, and
    # output 223 [223 + 223/224, 225), pixel 223 only 1/224: edges OpenCV counts (above its 1e-3),
    # 255 * (1/224) / s = 1.13 -> 1, beside 255 * (1 - 1/224) / s = 252.7 -> 253
    x = np.zeros((225, 225, 3), np.uint8)
    x[:, [1, 223]] = 255
    out = area_resize(x, 224)
    assert out[0, :3, 0].tolist() == [1, 253, 0] and out[0, -3:, 0].tolist() == [0, 253, 1]
    assert not out[:, 3:-3].any() and (out == out[:1]).all()


def test_area_resize_equals_opencv():
    rng = np.random.default_rng(0)
    for side, size in [(64, 32), (224, 32), (100, 32), (333, 32), (517, 224), (896, 224), (45, 32), (1234, 32)]:
        x = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        expected = cv2.resize(x, (size, size), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(area_resize(x, size), expected, err_msg=f"{side} -> {size}")


def test_prepare_with_area_resampling(tmp_path):
    path = tmp_path / "a.png"
    pixels = np.random.default_rng(1).integers(0, 256, (30, 45, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    np.testing.assert_array_equal(prepare(path, 10, crop="top-left", resample="area"),
                                  area_resize(pixels[:30, :30], 10))
    # smaller than the store's size: enlarged, as OpenCV's INTER_AREA does (each pixel a 2x2 block here)
    big = prepare(path, 60, resample="area")
    np.testing.assert_array_equal(big, pixels[:, 7:37].repeat(2, 0).repeat(2, 1))
    with pytest.raises(ValueError, match="unknown resampling"):
        prepare(path, 8, resample="lanczos")


# -- the image store -----------------------------------------------------------------------------


@pytest.fixture
def entries(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    solid(src / "b.png", GREEN)
    solid(src / "a.jpg", RED, format="PNG")
    (src / "dup.png").write_bytes((src / "a.jpg").read_bytes())
    (src / "c.jpg").write_text("<html><body>gone</body></html>")
    (src / "y.jpg").write_bytes(b"")
    return [
        {"category": "insect-flower/flower", "file": "b.png", "path": src / "b.png"},
        {"category": "insect-flower/flower", "file": "c.jpg", "path": src / "c.jpg"},
        {"category": "insect-flower/insect", "file": "x.jpg", "path": None, "reason": "HTTP 404 Not Found"},
        {"category": "insect-flower/flower", "file": "a.jpg", "path": src / "a.jpg"},
        {"category": "insect-flower/insect", "file": "y.jpg", "path": src / "y.jpg"},
        {"category": "insect-flower/flower", "file": "dup.png", "path": src / "dup.png", "reason": ""},
    ]


def test_image_store(tmp_path, entries):
    out = tmp_path / "out" / "images.h5"
    status = build_image_store(iter(entries), out, 8, crop="center", workers=3)
    assert [(r["file"], r["status"]) for r in status] == [
        ("b.png", "ok"), ("c.jpg", "corrupt"), ("x.jpg", "missing"),
        ("a.jpg", "ok"), ("y.jpg", "corrupt"), ("dup.png", "ok")]
    by_file = {r["file"]: r for r in status}
    assert by_file["c.jpg"]["reason"].startswith("not an image (looks like HTML")
    assert by_file["x.jpg"]["reason"] == "HTTP 404 Not Found" and by_file["x.jpg"]["sha256"] == ""
    assert by_file["y.jpg"]["reason"] == "empty file"
    assert by_file["dup.png"]["reason"] == "duplicate of a.jpg" and by_file["a.jpg"]["reason"] == ""
    assert by_file["b.png"]["sha256"] == sha256_file(entries[0]["path"])
    assert all(set(r) == {"category", "file", "status", "reason", "sha256", "decoder"} and r["decoder"] == "pil"
               for r in status)
    with h5py.File(out, "r") as f:
        assert dict(f.attrs) == {"size": 8, "crop": "center", "resample": "bicubic", "decoder": "pil", "n_images": 3,
                                 "n_skipped": 3}
        flower = f["insect-flower/flower"]
        assert [i.decode() for i in flower["ids"][()]] == ["a.jpg", "b.png", "dup.png"]
        assert flower["pixels"].dtype == np.uint8 and flower["pixels"].shape == (3, 8, 8, 3)
        assert (flower["pixels"][0] == RED).all() and (flower["pixels"][1] == GREEN).all()
        insect = f["insect-flower/insect"]  # every image failed: still there, empty
        assert insect["pixels"].shape == (0, 8, 8, 3) and insect["ids"].shape == (0,)
    assert sorted(p.name for p in out.parent.iterdir()) == ["images.h5"]


def test_image_store_leaves_nothing_on_failure(tmp_path, entries, monkeypatch):
    out = tmp_path / "out" / "images.h5"
    calls = []

    def failing(path, size, crop, resample, decoder):
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("disk on fire")
        return np.zeros((size, size, 3), np.uint8)

    monkeypatch.setattr(store, "prepare", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        build_image_store(entries, out, 8, workers=1)
    assert list(out.parent.iterdir()) == []


def test_image_store_rejects_bad_input(tmp_path, entries):
    out = tmp_path / "images.h5"
    with pytest.raises(InputError, match="insect-flower/flower: image file.s. listed twice: b.png"):
        build_image_store(entries + [entries[0]], out, 8)
    with pytest.raises(ValueError, match="unknown crop mode"):
        build_image_store(entries, out, 8, crop="left")
    with pytest.raises(ValueError, match="unknown resampling 'nearest'"):
        build_image_store(entries, out, 8, resample="nearest")
    with pytest.raises(ValueError, match="unknown decoder 'cv2'"):
        build_image_store(entries, out, 8, decoder="cv2")
    assert not out.exists()
