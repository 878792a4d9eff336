"""The command line: one association test, the models, tests and tables of a config, a results table,
the workflow (locally or on SLURM), the weights. One module per command, each with its parser
(``add_parser``) and its ``main``; what each knows of the suites it reads from their descriptors
(vlbias.suites.registry).

    vlbias run resources/stimuli/seat/weat1.yaml --model minilm        # one test, one model: a table row
    vlbias run resources/stimuli/ieat/age.yaml --model igpt --format md
    vlbias run my-test.yaml --store my-embeddings.h5                   # vectors in an embedding store
    vlbias run my-test.yaml --vectors mine.csv                         # your own vectors (CSV, NPY, HDF5)
    vlbias list models | tests | tables                                # what config/config.yaml holds
    vlbias show table1                                                 # a results table, as Markdown
    vlbias workflow --slurm -- --jobs 50                               # snakemake --profile profiles/slurm
    vlbias weights --dry-run                                           # what the models load, locked or not
    vlbias weights --update seat/minilm                                # resolve an entry anew, rewrite its lock

Paths are relative to the working directory, as the workflow's: run it in the repository (or a
project laid out like it: config/, resources/, results/).
"""

import argparse
import sys

from vlbias.cli import list as list_
from vlbias.cli import run, show, weights, workflow
from vlbias.cli.common import UsageError
from vlbias.errors import InputError
from vlbias.logs import setup_logging

COMMANDS = (run, list_, show, workflow, weights)


def parser():
    top = argparse.ArgumentParser(prog="vlbias", description=__doc__.split("\n\n")[0],
                                  epilog="vlbias <command> --help: the command's options")
    top.add_argument("--version", action="version", version=f"%(prog)s {__import__('vlbias').__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="command")
    for command in COMMANDS:
        command.add_parser(sub)
    return top


def main(argv=None):
    """The exit status of ``vlbias ARGV``; ``argv`` None: the program's own (sys.argv), whose stderr then
    gets progress as a workflow job's terminal does, and whose exit skips the garbage collections of
    torch's objects (vlbias.logs.setup_logging)."""
    args = parser().parse_args(argv)
    if argv is None:
        setup_logging()
    try:
        return args.func(args)
    except (UsageError, InputError) as e:
        print(f"vlbias {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
