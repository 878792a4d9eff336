# Names the rules share, bound to the planning in Python (vlbias.suites.plan, vlbias.suites.ieat.plan;
# unit-tested in tests/test_plan.py), and the wildcard constraints.

from functools import partial
from pathlib import Path

from vlbias.io.fetch import read_manifest
from vlbias.suites import plan
from vlbias.suites.ieat.plan import IeatPlan
from vlbias.suites.seat import plan as seat_plan
from vlbias.suites.plan import alternatives, provenance, vector_files
from vlbias.weights import record_path

IEAT = config["ieat"]
SEAT = config["seat"]
STATS = config["stats"]
IEAT_PLAN = IeatPlan(config)
IEAT_TABLES = IEAT_PLAN.tables
IEAT_MODELS = IEAT_PLAN.models  # ieat/models and the sweep's entries
SWEEP_MODELS = IEAT_PLAN.sweep_models
TABLE_MODELS = IEAT_PLAN.table_models  # the names tables use: {name: (entry, output or None)}
PUBLISHED_MODELS = IEAT_PLAN.published_models
IMAGE_MODELS = IEAT_PLAN.image_models
VECTOR_MODELS = IEAT_PLAN.vector_models
SEVERAL_OUTPUTS = IEAT_PLAN.several_outputs  # image models giving several vectors per image: a store each
SEAT_VECTOR_MODELS = [m for m, spec in SEAT["models"].items() if spec["source"] == "vectors"]
DEFAULT_STORE = IEAT_PLAN.default_store
IMAGE_STORES = IEAT_PLAN.image_stores_settings  # every image store a model reads, and the default one

seat_tests = partial(seat_plan.seat_tests, config)
source = partial(plan.source, config)
mirror = partial(plan.mirror, config)
stats_params = partial(plan.stats_params, config)
image_store = IEAT_PLAN.image_store
image_stores = IEAT_PLAN.image_stores
paper_name = IEAT_PLAN.paper_name
sweep_tests = IEAT_PLAN.sweep_tests
model_tests = IEAT_PLAN.model_tests
text_stimuli = IEAT_PLAN.text_stimuli
checked_stimulus = IEAT_PLAN.checked_stimulus
table_stimuli = IEAT_PLAN.table_stimuli


wildcard_constraints:
    table=alternatives(list(IEAT_TABLES)),
    model=alternatives(sorted(set(IEAT_MODELS) | set(TABLE_MODELS) | set(SEAT["models"]))),
