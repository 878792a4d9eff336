"""Mask I on pixels (vlbias.models.pixels): the selected boxes painted with the processor's mean colour."""

import numpy as np
import pytest
from transformers import BlipImageProcessor

from vlbias.errors import InputError
from vlbias.models.pixels import fill_regions, mean_colour


def test_fill_regions_paints_the_selected_boxes_only():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (20, 40, 3), dtype=np.uint8)
    before = image.copy()
    # x1, y1, x2, y2 over the width (40) and height (20): pixels 4..10 across, 2..5 down; the second
    # box is not selected, the third overlaps the right and bottom edges
    boxes = np.array([[0.1, 0.1, 0.25, 0.25], [0.5, 0.5, 0.9, 0.9], [0.95, 0.9, 1.0, 1.0]])
    colour = np.array([1, 2, 3], dtype=np.uint8)
    out = fill_regions(image, boxes, np.array([True, False, True]), colour)
    filled = np.zeros((20, 40), dtype=bool)
    filled[2:6, 4:11] = True
    filled[18:, 38:] = True
    assert (out[filled] == colour).all()
    assert (out[~filled] == image[~filled]).all()
    assert (image == before).all()  # the caller's image untouched


def test_fill_regions_paints_integer_boxes_to_both_ends():
    """Boxes in whole pixels, normalised in float32 as the region store does it (float32 pixels over
    float32 sizes): every one paints exactly its columns x1..x2 and rows y1..y2."""
    h, w = 40, 56
    image = np.zeros((h, w, 3), np.uint8)
    colour = np.array([255, 255, 255], np.uint8)
    norm = lambda box: np.float32(box) / np.float32([w, h, w, h])  # noqa: E731 (the store's boxes_norm)
    out = fill_regions(image, norm([[10, 5, 30, 20]]), np.array([True]), colour)
    painted = np.argwhere(out[:, :, 0] == 255)
    assert painted[:, 1].min() == 10 and painted[:, 1].max() == 30  # columns 10..30, both ends
    assert painted[:, 0].min() == 5 and painted[:, 0].max() == 20 and len(painted) == 21 * 16
    # every pixel of the image as a one-pixel box (x, y, x, y): that pixel and no other
    ys, xs = np.mgrid[:h, :w]
    singles = norm(np.stack([xs, ys, xs, ys], axis=-1).reshape(-1, 4))
    for box, (x, y) in zip(singles, zip(xs.ravel(), ys.ravel())):
        got = np.argwhere(fill_regions(image, box[None], np.array([True]), colour)[:, :, 0] == 255)
        assert got.tolist() == [[y, x]], (x, y, box * [w, h, w, h])
    # a box in fractions of a pixel covers the pixels its ends fall in; one reaching the edge, the last
    out = fill_regions(image, np.array([[10.5 / w, 5.2 / h, 29.7 / w, 19.99 / h], [0.9, 0.9, 1.0, 1.0]]),
                       np.array([True, True]), colour)
    expected = np.zeros((h, w), bool)
    expected[5:20, 10:30] = expected[36:, 50:] = True
    assert (out[:, :, 0] == 255).tolist() == expected.tolist()


def test_fill_regions_nothing_selected_is_the_image():
    image = np.full((5, 5, 3), 7, dtype=np.uint8)
    out = fill_regions(image, np.array([[0, 0, 1, 1]]), np.array([False]), np.zeros(3, np.uint8))
    assert (out == image).all()


def test_mean_colour_is_what_the_processor_normalises_to_zero():
    processor = BlipImageProcessor()
    colour = mean_colour(processor.image_mean)
    assert colour.tolist() == [round(m * 255) for m in processor.image_mean]
    image = fill_regions(np.zeros((8, 8, 3), np.uint8), np.array([[0, 0, 1, 1]]), np.array([True]), colour)
    pixels = processor(images=image, return_tensors="np", do_resize=False)["pixel_values"]
    assert np.abs(pixels).max() < 0.5 / 255 / min(processor.image_std)  # within the rounding to uint8


@pytest.mark.parametrize(("boxes", "selected"), [(np.zeros((2, 4)), np.array([True])),
                                                 (np.array([[0, 0, 2, 1]]), np.array([True])),
                                                 (np.zeros((1, 4)), np.array([1]))])
def test_fill_regions_refuses_bad_boxes(boxes, selected):
    with pytest.raises(InputError):
        fill_regions(np.zeros((4, 4, 3), np.uint8), boxes, selected, np.zeros(3, np.uint8))
