import pandas as pd

from vlbias.associate import COLUMNS, run_test
from vlbias.io.atomic import atomic_path
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging

setup_logging(snakemake.log[0])
row = run_test(
    load_stimulus(snakemake.input.stimulus), snakemake.input.store, snakemake.wildcards.model,
    threads=snakemake.threads, **snakemake.params.stats,
)
with atomic_path(snakemake.output[0]) as tmp:
    pd.DataFrame([row]).reindex(columns=COLUMNS).to_csv(tmp, index=False)
