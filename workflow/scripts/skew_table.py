from vlbias.logs import setup_logging
from vlbias.report.skew import MARKDOWN_COLUMNS, plot_skew, skew_note
from vlbias.report.tables import write_tables
from vlbias.suites.skew import attribute_values, skew_table

setup_logging(snakemake.log[0])
p = snakemake.params
dataset = snakemake.wildcards.dataset
table = skew_table(dataset, dict(zip(p.models, snakemake.input.stores)), snakemake.input.status,
                   attribute_values(p.spec), p.settings, snakemake.input.published, p.paper)
caption = f"Zero-shot retrieval skew over {dataset}"
write_tables(table, caption, csv=snakemake.output.csv)
write_tables(table[list(MARKDOWN_COLUMNS)].round(3), caption, md=snakemake.output.md, note=skew_note(p.settings))
plot_skew(table, snakemake.output.png, caption)
