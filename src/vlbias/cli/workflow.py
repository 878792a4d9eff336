"""vlbias workflow: snakemake in the working directory, locally or on SLURM (profiles/slurm)."""

import argparse
import importlib.util
import subprocess
import sys

from vlbias.cli.common import UsageError

SLURM_PLUGIN = "snakemake_executor_plugin_slurm"


def add_parser(sub):
    p = sub.add_parser("workflow", help="run the workflow (snakemake), locally or on SLURM",
                       description="snakemake in the working directory (the repository), with "
                                   "--profile profiles/slurm when --slurm is given; arguments after -- go "
                                   "to snakemake.")
    p.add_argument("--slurm", action="store_true", help="on a SLURM cluster (needs pip install -e '.[slurm]')")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="arguments for snakemake (after --)")
    p.set_defaults(func=main)


def main(args):
    profile = []
    if args.slurm:
        if importlib.util.find_spec(SLURM_PLUGIN) is None:
            raise UsageError("the SLURM profile needs Snakemake's SLURM executor plugin, which is not installed: "
                             "pip install -e '.[slurm]' (snakemake-executor-plugin-slurm); without it snakemake "
                             "stops at \"invalid choice: 'slurm'\"")
        profile = ["--profile", "profiles/slurm"]
    snakemake_args = args.snakemake_args[1:] if args.snakemake_args[:1] == ["--"] else args.snakemake_args
    return subprocess.run([sys.executable, "-m", "snakemake", *profile, *snakemake_args], check=False).returncode
