import logging

import pandas as pd

from vlbias.io.stimuli import load_stimulus
from vlbias.io.store import read_set
from vlbias.logs import Progress, setup_logging
from vlbias.report.tables import write_tables
from vlbias.stats.specificity import false_positive_rates, random_partition_pvalues

setup_logging(snakemake.log[0])
p = snakemake.params
stimulus = load_stimulus(snakemake.input.stimulus)
rows = []
for model, store in zip(p.models, snakemake.input.stores):
    X, Y, A, B = (read_set(store, st.key)[0] for st in stimulus.sets.values())
    progress = Progress(p.n_tests, f"{model}: random re-partitions of {stimulus.id}", logging.getLogger("specificity"))
    pvals = random_partition_pvalues(X, Y, A, B, n_tests=p.n_tests, n_samples=p.n_samples,
                                     seed=p.seed, threads=snakemake.threads, progress=progress)
    progress.done()
    for alpha, rate in false_positive_rates(pvals, p.alphas).items():
        rows.append({"test": stimulus.id, "model": model, "alpha": alpha, "false_positive_rate": rate,
                     "n_tests": p.n_tests, "n_samples": p.n_samples, "seed": p.seed,
                     "n_x": len(X), "n_y": len(Y), "n_a": len(A), "n_b": len(B)})
write_tables(pd.DataFrame(rows), p.caption, csv=snakemake.output.csv, html=snakemake.output.html)
