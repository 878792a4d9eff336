import logging

from vlbias.images.acquire import (FAILURE_COLUMNS, STATUS_COLUMNS, SUMMARY_COLUMNS, arrived, failures,
                                   mark_duplicates, summarize)
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.logs import setup_logging

setup_logging(snakemake.log[0])
# duplicates are marked again across the whole dataset: the first image with a content keeps it
status = mark_duplicates([r for path in snakemake.input for r in read_manifest(path)])
write_manifest(snakemake.output.failures, failures(status), FAILURE_COLUMNS)
write_manifest(snakemake.output.summary, summarize(status), SUMMARY_COLUMNS)
write_manifest(snakemake.output.manifest, status, STATUS_COLUMNS)
logging.getLogger("grounded_dataset").info("%s: %s", snakemake.wildcards.dataset, arrived(status))
