import logging

import pandas as pd

from vlbias.logs import setup_logging
from vlbias.report.figures import plot_published_vs_reproduced, plot_suite_heatmap, suite_rows
from vlbias.report.html import figure_page

setup_logging(snakemake.log[0])
out, title = snakemake.output, snakemake.params.title
rows = suite_rows({name: pd.read_csv(path) for name, path in snakemake.input.items()})
heading = f"{title}: effect size d per test and model"
plot_suite_heatmap(rows, out.heatmap, heading, family="one model's tests of one stimulus family in its table")
figure_page(out.heatmap, out.page, heading)
if "published" in out.keys():
    plot_published_vs_reproduced(rows, out.published, f"{title}: published d against reproduced d")
logging.getLogger("suite_figures").info("%s: %d rows of %d tables", title, len(rows), len(snakemake.input))
