"""What the SEAT/WEAT workflow builds (workflow/rules/seat.smk), planned from the checked config."""

import re

from vlbias.io.stimuli import load_stimulus
from vlbias.suites.plan import MLEAT_KINDS, mleat_on, mleat_path, stimulus_ids
from vlbias.weights import record_path


def table_path(model, ext="csv"):
    """A SEAT model's table of every test."""
    return f"results/seat/{model}/table.{ext}"


def caption(model):
    return f"Word- and sentence-level WEAT/SEAT (May et al. 2019) on {model}"


def natural_key(test):
    """Tests in their natural order: weat2 before weat10, and a sentence-level variant (sent-<id>) right
    after its word-level test."""
    base = test.removeprefix("sent-")
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", base)], test != base


def seat_tests(config, model=None):
    """The tests ``model`` runs: its entry's `tests`, else seat/tests (``model`` None: seat/tests);
    `all` is every stimulus file in its natural order (``natural_key``), a list is taken as listed."""
    seat = config["seat"]
    tests = seat["models"][model].get("tests", seat["tests"]) if model else seat["tests"]
    return sorted(stimulus_ids(seat["stimuli"]), key=natural_key) if tests == "all" else list(tests)


def stimuli(config, model):
    """The stimulus files of ``model``'s tests, each loaded and checked (errors name the file and key):
    called by the input functions, so a malformed file fails the targets that use it before any job runs."""
    paths = [f"{config['seat']['stimuli']}/{test}.yaml" for test in seat_tests(config, model)]
    for path in paths:
        load_stimulus(path)
    return paths


def targets(config):
    """Each model's table, and its ML-EAT files (results/seat/mleat/<model>.*) when stats/mleat/build."""
    models = config["seat"]["models"]
    found = [table_path(model, ext) for model in models for ext in ("csv", "md", "html")]
    return found + ([mleat_path("seat", m, kind) for m in models for kind in MLEAT_KINDS] if mleat_on(config) else [])


def weights(config):
    """The weights records the SEAT targets need: every model entry but a user's vectors."""
    return [record_path(f"seat/{m}") for m, spec in config["seat"]["models"].items() if spec["source"] != "vectors"]
