import logging

from vlbias.io.fetch import sha256_file
from vlbias.logs import setup_logging
from vlbias.regions.extract import manifest_entries
from vlbias.regions.store import write_person_list
from vlbias.regions.tsv import TsvSource, read_tsv_regions

setup_logging(snakemake.log[0])
manifest = snakemake.input.manifest
# vocabularies given as URLs are downloaded once into the workflow's cache, as the bua detector's
source = TsvSource({"cache": snakemake.params.cache, **snakemake.params.spec})
summary = read_tsv_regions(
    snakemake.input.tsv, manifest_entries(manifest), source, snakemake.output.store,
    provenance={"detector": snakemake.wildcards.source, "dataset": snakemake.wildcards.dataset,
                "manifest": manifest, "manifest_sha256": sha256_file(manifest)},
)
logging.getLogger("vlbias").info("%s: %d images, %d regions, %d not in %s (%d lines) in %.1f s",
                                 snakemake.output.store, summary["n_images"], summary["n_regions"],
                                 summary["n_skipped"], snakemake.input.tsv, summary["n_lines"], summary["seconds"])
write_person_list(snakemake.output.store, snakemake.output.persons)
