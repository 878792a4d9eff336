"""The OASIS valence images (vlbias.suites.zoo.oasis): Ghate et al.'s selection from the ratings, each file
checked against the user's manifest, the selected images' store."""

import h5py
import pytest
from helpers.zoo import write_oasis

from vlbias.errors import InputError
from vlbias.suites.zoo.oasis import build_oasis_store, select_valence

# in file order; three themes tie at the top and three at the bottom
RATINGS = [("Dog 1", 6.5), ("Fire 2", 1.2), ("Cake 1", 6.5), ("Lake 1", 4.0), ("War 3", 1.2), ("Sun 1", 6.5),
           ("Mud 1", 1.2), ("Rock 2", 3.0)]
SETTINGS = {"size": 16, "crop": "center", "resample": "bicubic", "decoder": "pil"}


def test_the_selection_is_theirs_ties_in_file_order(tmp_path):
    write_oasis(tmp_path / "OASIS", RATINGS)
    # by hand: descending, ties in file order: Dog 1, Cake 1, Sun 1, Lake 1, Rock 2, Fire 2, War 3, Mud 1;
    # the first two and the last two
    assert select_valence(tmp_path / "OASIS/OASIS.csv", per_set=2) == {
        "oasis/pleasant": ["Dog 1", "Cake 1"], "oasis/unpleasant": ["War 3", "Mud 1"]}
    assert select_valence(tmp_path / "OASIS/OASIS.csv", per_set=4)["oasis/unpleasant"] == [
        "Rock 2", "Fire 2", "War 3", "Mud 1"]
    with pytest.raises(InputError, match=r"OASIS.csv: 8 rows, fewer than the 50 images selected$"):
        select_valence(tmp_path / "OASIS/OASIS.csv")
    other = tmp_path / "other.csv"
    other.write_text("Theme,Valence\nDog 1,6.5\n")
    with pytest.raises(InputError, match="other.csv: has no column Valence_mean: not OASIS's ratings table"):
        select_valence(other)


def test_the_selected_images_are_checked_and_stored(tmp_path):
    folder = tmp_path / "OASIS"
    manifest = write_oasis(folder, RATINGS)
    build_oasis_store(folder, manifest, tmp_path / "s.h5", tmp_path / "status.tsv", SETTINGS, per_set=2)
    with h5py.File(tmp_path / "s.h5") as f:
        assert sorted(f) == ["oasis"] and f["oasis/pleasant/pixels"].shape == (2, 16, 16, 3)
        # the store orders each category's images by file name
        assert [i.decode() for i in f["oasis/unpleasant/ids"][()]] == ["Mud 1.jpg", "War 3.jpg"]
    assert "oasis/pleasant\tCake 1.jpg\tok" in (tmp_path / "status.tsv").read_text()


@pytest.mark.parametrize("damage, error", [
    (lambda folder: (folder / "Images/War 3.jpg").write_bytes(b"not it"),
     r"OASIS/Images/War 3.jpg: sha256 [0-9a-f]{64} is not the one .*OASIS.tsv lists \([0-9a-f]{64}\)$"),
    (lambda folder: (folder / "OASIS.csv").write_text((folder / "OASIS.csv").read_text().replace("6.5", "6.6", 1)),
     r"OASIS/OASIS.csv: sha256 [0-9a-f]{64} is not the one"),
    (lambda folder: (folder / "Images/Cake 1.jpg").unlink(), r"OASIS/Images/Cake 1.jpg: missing from the OASIS folder"),
    (lambda folder: folder.with_suffix(".tsv").write_text(
        "\n".join(line for line in folder.with_suffix(".tsv").read_text().split("\n") if "Dog 1" not in line)),
     r"OASIS.tsv: lists no 'Images/Dog 1.jpg'"),
])
def test_a_file_off_its_manifest_is_one_line_naming_it(tmp_path, damage, error):
    folder = tmp_path / "OASIS"
    manifest = write_oasis(folder, RATINGS)
    damage(folder)
    with pytest.raises(InputError, match=error) as e:
        build_oasis_store(folder, manifest, tmp_path / "s.h5", tmp_path / "status.tsv", SETTINGS, per_set=2)
    assert "\n" not in str(e.value) and not (tmp_path / "s.h5").exists()
