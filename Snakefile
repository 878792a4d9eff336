# vlbias: social-bias association tests for vision, language and vision-language models.
# `snakemake --cores N` builds every table of the configured suites; see README.md.

from snakemake.utils import min_version, validate

min_version("8.20")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/ieat.smk"
include: "workflow/rules/seat.smk"
include: "workflow/rules/grounded.smk"
include: "workflow/rules/regions.smk"
include: "workflow/rules/mlm.smk"
include: "workflow/rules/grounded_tests.smk"
include: "workflow/rules/associate.smk"


rule all:
    input:
        all_targets(),
        grounded_targets(),
        regions_targets(),
        mlm_targets(),
        grounded_tests_targets(),
    default_target: True
