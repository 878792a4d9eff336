"""Logging for rule scripts: to the rule's log file and to stderr, errors included."""

import logging
import sys


def setup_logging(path=None, level=logging.INFO):
    handlers = [logging.StreamHandler(sys.stderr)]
    if path:
        handlers.append(logging.FileHandler(path, mode="w", encoding="utf-8"))
    logging.basicConfig(level=level, handlers=handlers, force=True,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    def log_uncaught(kind, value, tb):
        # the log file then says why the job failed, not only Snakemake's console
        logging.getLogger("vlbias").error("%s: %s", kind.__name__, value, exc_info=(kind, value, tb))

    sys.excepthook = log_uncaught
