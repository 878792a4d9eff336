import logging

import pandas as pd

from vlbias.logs import setup_logging
from vlbias.report.figures import plot_published_vs_reproduced, plot_suite_heatmap
from vlbias.report.grounded import figure_rows, read_printed
from vlbias.report.html import figure_page
from vlbias.report.layout import FAMILY

setup_logging(snakemake.log[0])
out = snakemake.output
rows = pd.concat([pd.read_csv(p, dtype={"experiment": str, "mask": str}, keep_default_na=False)
                  for p in snakemake.input.results], ignore_index=True).to_dict("records")
printed = read_printed(snakemake.input.published) if snakemake.input.published else None
heatmap, published = figure_rows(rows, printed, snakemake.params.columns, snakemake.params.levels,
                                 snakemake.params.groups)
heading = "Grounded WEAT/SEAT, experiment 1: effect size d per test, model and level"
plot_suite_heatmap(heatmap, out.heatmap, heading, family=FAMILY)
figure_page(out.heatmap, out.page, heading)
plot_published_vs_reproduced(published, out.published, "Grounded WEAT/SEAT: published d against reproduced d")
logging.getLogger("grounded_figures").info("%d results in the heatmap, %d beside a printed d", len(heatmap),
                                           len(published))
