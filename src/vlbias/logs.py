"""Logging for rule scripts: to the rule's log file and to stderr, errors included; progress of long loops.

An error the user caused (an InputError: a file, a key, a URL to fix) is one line on the terminal;
its traceback goes to the job's log file only, or to the terminal too with VLBIAS_DEBUG=1. Any
other uncaught exception is a bug: its traceback goes to both.

The terminal gets a job's summary lines; per-item detail (an image that did not arrive, a category
read) is logged with ``extra=FILE_ONLY`` and goes to the job's log file only, beside the table
(failures.tsv, manifest.tsv) that lists every item:

    log.warning("%s: %s", image, reason, extra=FILE_ONLY)
    log.info("google: 0 of 12281 images arrived; 12281 not in the mirror (see .../failures.tsv)")
"""

import atexit
import gc
import logging
import os
import sys
import time

from vlbias.errors import InputError


# per-item detail: the job's log file, not the terminal (a summary line says what it adds up to)
FILE_ONLY = {"file_only": True}


def _not_file_only(record):
    return not getattr(record, "file_only", False)


class _Terminal(logging.Formatter):
    """The terminal's format: a user's error (``record.user_error``) without its traceback."""

    def format(self, record):
        if getattr(record, "user_error", False):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return super().format(record)


def setup_logging(path=None, level=logging.INFO):
    form = "%(asctime)s %(name)s %(levelname)s %(message)s"
    terminal = logging.StreamHandler(sys.stderr)
    terminal.setFormatter(_Terminal(form))
    terminal.addFilter(_not_file_only)
    handlers = [terminal]
    if path:
        handlers.append(logging.FileHandler(path, mode="w", encoding="utf-8"))
    logging.basicConfig(level=level, handlers=handlers, force=True, format=form)

    def log_uncaught(kind, value, tb):
        # the log file then says why the job failed, not only Snakemake's console
        user = issubclass(kind, InputError) and not os.environ.get("VLBIAS_DEBUG")
        logging.getLogger("vlbias").error("%s", value if user else f"{kind.__name__}: {value}",
                                          exc_info=(kind, value, tb), extra={"user_error": user})

    sys.excepthook = log_uncaught
    # A job that imported torch and transformers spends 1.5 s of its exit in garbage collections
    # while the interpreter tears its modules down; frozen, those objects are not scanned again.
    atexit.register(gc.freeze)


class Progress:
    """Log "<what>: done/total (p%), rate, time left" every ``every`` seconds while a long loop runs.

        progress = Progress(len(images), "images", log)
        for ...:
            progress.advance()     # or advance(n)
        progress.done()            # the final line, with the total time

    The lines go wherever the logger goes: the job's log file, and stderr, which is the terminal of
    an interactive run (more often there, ``every_tty`` seconds).
    """

    def __init__(self, total, what, logger, every=10.0, every_tty=2.0):
        self.total, self.what, self.log = int(total), what, logger
        self.every = every_tty if sys.stderr.isatty() else every
        self.n, self.start = 0, time.monotonic()
        self.last = self.start

    def advance(self, n=1):
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every and self.n < self.total:
            self.last = now
            rate = self.n / (now - self.start)
            left = (self.total - self.n) / rate if rate > 0 else float("inf")
            self.log.info("%s: %d/%d (%.0f%%), %.1f/s, about %s left", self.what, self.n, self.total,
                          100 * self.n / max(self.total, 1), rate, _duration(left))

    def done(self, note="", terminal=True):
        """The final line; ``terminal`` False: the log file's only, where the job's summary line says it all."""
        seconds = time.monotonic() - self.start
        self.log.info("%s: %d/%d done in %s%s", self.what, self.n, self.total, _duration(seconds),
                      f"; {note}" if note else "", extra=None if terminal else FILE_ONLY)


def _duration(seconds):
    if seconds == float("inf"):
        return "?"
    seconds = round(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
