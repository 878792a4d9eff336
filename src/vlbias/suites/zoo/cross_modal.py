"""Ghate et al.'s cross-modal valence tests in their four orders (their perform_cross_modal.py: image as
target with text attributes, text as target with image attributes, all image, all text). Their test list
(data/cross_modal_controlled_no_weat_all_tests.csv) is a Git LFS pointer, so zoo/cross_modal rebuilds it
from their notebooks' four tests (Insect-Flower, Race, Gender, Age, each against Valence): a row per test
pairs the iEAT image categories of its targets with the text test of theirs (data/tests_nrc) whose targets
name the same groups, in the same order. Their valence attributes are that text test's words (their NRC-VAD
words) and the OASIS images (vlbias.suites.zoo.oasis), a licensed set: without zoo/oasis the two orders with
image attributes are recorded skips naming it and where to get it.

    tests = cross_modal_tests(read_cross_modal("resources/zoo/cross_modal.tsv"), text_stimuli, oasis=True)
    [(stimulus, skip) ...]    # skip: why it is not run (OASIS absent), or None
"""

from dataclasses import replace

from vlbias.errors import InputError
from vlbias.io.stimuli import StimulusSet
from vlbias.suites.zoo.oasis import ABSENT, CATEGORIES
from vlbias.suites.zoo.text import FAMILY

COLUMNS = ("test", "image_x", "image_y", "text_test")
ORDERS = ("image-text", "text-image", "image-image", "text-text")


def read_cross_modal(path):
    """The rows of zoo/cross_modal (a TSV with COLUMNS, '#' comment lines)."""
    from vlbias.io.fetch import read_manifest

    return read_manifest(path, required=COLUMNS)


def cross_modal_tests(rows, text_stimuli, oasis):
    """Each row's test in the four ORDERS: (its Stimulus, the reason it is skipped or None). Its id is
    "<test>:<order>"; text sets are its text test's (``text_stimuli``: {id: Stimulus}, the tests the
    models embedded), image targets the row's iEAT categories, image attributes the OASIS images' (skipped
    unless ``oasis``: the models embedded them)."""
    tests = []
    for row in rows:
        text = text_stimuli.get(row["text_test"])
        if text is None:
            raise InputError(row["text_test"], f"cross-modal test '{row['test']}': its text test is not among "
                                               "zoo/text_tests")
        image = {"X": StimulusSet(key=row["image_x"], label=text.X.label, category=row["image_x"]),
                 "Y": StimulusSet(key=row["image_y"], label=text.Y.label, category=row["image_y"]),
                 "A": StimulusSet(key=CATEGORIES[0], label=text.A.label, category=CATEGORIES[0]),
                 "B": StimulusSet(key=CATEGORIES[1], label=text.B.label, category=CATEGORIES[1])}
        for order in ORDERS:
            targets, attributes = order.split("-")
            sets = {s: image[s] if kind == "image" else text.sets[s]
                    for kind, pair in ((targets, "XY"), (attributes, "AB")) for s in pair}
            stimulus = replace(text, id=f"{row['test']}:{order}", name=f"{row['test']} ({order})", family=FAMILY,
                               level="cross-modal", **sets)
            tests.append((stimulus, ABSENT if attributes == "image" and not oasis else None))
    return tests


def battery(paths, cross_modal, oasis):
    """The zoo's tests: those of the battery's files (``paths``: iEAT stimuli, text tests), none skipped,
    then the cross-modal tests of the ``cross_modal`` file (None: none; ``oasis``: whether the models embedded
    the OASIS images)."""
    from vlbias.suites.zoo.text import load_test

    tests = [(load_test(p), None) for p in paths]
    if cross_modal is None:
        return tests
    return tests + cross_modal_tests(read_cross_modal(cross_modal), {s.id: s for s, _ in tests}, oasis)
