"""The result row of an association test, declared once: the columns of every results table and the
one builder of a row.

A row is, in order: the test's identity, the stimuli used per set, the test's statistics, its
status and the provenance of the vectors. The shared parts are declared once (``IDENTITY``,
``SIZES``, ``PROVENANCE``); each kind of table (``ASSOCIATION``: iEAT, SEAT, ``vlbias run`` and the
notebook API; ``MLEAT``; ``GROUNDED``: Ross et al.'s experiments) declares its statistics and its own
identity and provenance beside them, here. A new column is its name here, its computation where
the statistic is computed, and its line in the table's caption.

The sets carry the papers' symbols: targets X, Y and attributes A, B, and ``n_x``, ``n_y``, ``n_a``,
``n_b`` the stimuli of each set the test used (the vectors read, not the stimulus file's list: an
image that never arrived is not counted). Older files name some of these columns otherwise
(``RENAMED``); ``renamed`` reads them as today's.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vlbias.errors import UsageError

if TYPE_CHECKING:  # pandas where a table is built, not where a statistic is (vlbias.stats.mleat)
    import pandas as pd

SETS = ("X", "Y", "A", "B")
SIZES = tuple(f"n_{s.lower()}" for s in SETS)
IDENTITY = ("test", "name", "family", "model", *SETS)
PROVENANCE = ("model_id", "revision", "weights")
# the grounded suite's: the run and the detector behind a model's vectors, its image sets per role
GROUNDED_IDENTITY = ("protocol", "dataset", "test", "name", "model", "column", "experiment", "level", "mask")
GROUNDED_PROVENANCE = ("model_id", "revision", "commit", "weights_sha256", "detector")
GROUNDED_ROLES = ("X", "Y", "A_x", "A_y", "B_x", "B_y")

# Columns renamed since a file may have been written: {old name: today's}. Read back (``renamed``)
# wherever a user's results file is read: ``vlbias show``, the grounded tables' experiment rows.
RENAMED = {"n_t": "n_x", **{f"n_{r}": f"n_{r.lower()}" for r in GROUNDED_ROLES}}


@dataclass(frozen=True)
class Row:
    """The columns of one kind of results table, in order: identity, sizes, statistics, status,
    provenance. ``optional``: identity and provenance columns a table leaves out when none of its
    rows has them (an ML-EAT table of a SEAT run has no grounded protocol)."""

    identity: tuple[str, ...]
    sizes: tuple[str, ...]
    statistics: tuple[str, ...]
    provenance: tuple[str, ...]
    optional: tuple[str, ...] = ()

    @property
    def columns(self) -> list[str]:
        return [*self.identity, *self.sizes, *self.statistics, "status", *self.provenance]

    @property
    def computed(self) -> list[str]:
        """The columns a test's computation gives (vlbias.stats.mleat.MLEATResult.row): sizes,
        statistics, status."""
        return [*self.sizes, *self.statistics, "status"]

    def build(self, *parts: Mapping[str, Any], **values: Any) -> dict[str, Any]:
        """A row: the values of ``parts`` and ``values`` (later ones win) in the declared order, the
        absent left out (a skipped test has no d). A value of an undeclared column raises UsageError: a
        statistic computed and never declared would not reach the table."""
        given = {k: v for part in (*parts, values) for k, v in part.items()}
        undeclared = [k for k in given if k not in self.columns]
        if undeclared:
            raise UsageError(f"result row: undeclared column(s) {', '.join(undeclared)} (vlbias.stats.row)")
        return {c: given[c] for c in self.columns if c in given}

    def frame(self, rows: Iterable[Mapping[str, Any]]) -> "pd.DataFrame":
        """``rows`` as a table, every declared column in order (empty where a row lacks it), the
        optional ones only where some row has them."""
        import pandas as pd

        df = pd.DataFrame(list(rows))
        return df.reindex(columns=[c for c in self.columns if c not in self.optional or c in df])


def renamed(df: "pd.DataFrame") -> "pd.DataFrame":
    """A results table read from a file, its columns of older names (``RENAMED``) under today's."""
    return df.rename(columns={old: new for old, new in RENAMED.items() if new not in df})


ASSOCIATION = Row(
    IDENTITY, SIZES,
    # d_low, d_high and the ci_ settings: filled when the row was computed with a confidence interval
    ("d", "d_low", "d_high", "p", "p_se", "p_parametric", "n_samples", "exact", "n_partitions", "seed",
     "ci_level", "ci_method", "ci_n_boot", "ci_seed"),
    PROVENANCE,
)

# ML-EAT (vlbias.stats.mleat) on an association test's sets or on a grounded test's (its level's)
_MLEAT_IDENTITY = ("protocol", "dataset", "test", "name", "family", "model", "column", "level", *SETS)
_MLEAT_PROVENANCE = (*PROVENANCE, "commit", "weights_sha256", "detector")
MLEAT = Row(
    _MLEAT_IDENTITY, SIZES,
    ("pattern", "cosine_uninformative",
     "l1_d", "l1_d_low", "l1_d_high", "l1_p", "l1_p_se", "l1_p_normal", "l1_exact", "l1_n_samples", "l1_n_partitions",
     *(f"l2{t}_{k}" for t in "xy" for k in ("d", "p", "p_count", "p_normal", "p_se", "exact", "n_samples",
                                             "n_partitions")),
     *(f"l3_{q}_{k}" for q in ("xa", "xb", "ya", "yb") for k in ("mean", "std")),
     "alpha", "null", "saturation", "seed"),
    _MLEAT_PROVENANCE,
    optional=(*_MLEAT_IDENTITY, *_MLEAT_PROVENANCE),
)

GROUNDED = Row(
    GROUNDED_IDENTITY, tuple(f"n_{r.lower()}" for r in GROUNDED_ROLES),
    ("statistic", "d", "p", "p_se", "exact", "n_samples", "seed", "d_x", "d_y", "p_x", "p_y", "masked_statistic"),
    GROUNDED_PROVENANCE,
)
