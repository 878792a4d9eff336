"""What the SEAT/WEAT workflow builds (workflow/rules/seat.smk), planned from the checked config."""

from vlbias.suites.plan import stimulus_ids
from vlbias.weights import record_path


def table_path(model, ext="csv"):
    """A SEAT model's table of every test."""
    return f"results/seat/{model}/table.{ext}"


def seat_tests(config):
    seat = config["seat"]
    return stimulus_ids(seat["stimuli"]) if seat["tests"] == "all" else list(seat["tests"])


def targets(config):
    return [table_path(model, ext) for model in config["seat"]["models"] for ext in ("csv", "md", "html")]


def weights(config):
    """The weights records the SEAT targets need: every model entry but a user's vectors."""
    return [record_path(f"seat/{m}") for m, spec in config["seat"]["models"].items() if spec["source"] != "vectors"]
