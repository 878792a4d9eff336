"""Weights as workflow inputs: fetched once (where the network is), locked to what was resolved,
verified before use (where there may be no network). The one way weights reach a model or a
detector: fetch -> record -> verify -> load from the verified files.

    sources = remote_sources(spec, kind_of(name))           # what an entry loads (no download)
    record = fetch(name, spec, cache=..., lock_path=...)    # downloads, checked against the lock
    write_record(record_path(name), record); read_record(record_path(name))
    spec = localize(name, spec, record, cache=..., lock_path=...)   # job side: verified files, offline
    spec = prepare(name, spec, cache=..., lock_path=...)    # fetch and localize (vlbias run, a library user)
    provenance(record)                                      # the record without machine-local paths

What an entry loads is declared once, in its adapter schema (vlbias.weights.declarations); each
kind of source has one resolver (vlbias.weights.sources), the only downloads of weights (with one
size cap: vlbias.weights.download); the lock (vlbias.weights.lock) pins each remote source's commit
and file digests; records and the job side are vlbias.weights.record. Adapters never download: the
registry refuses an entry naming remote weights that did not come through ``localize``
(``unfetched``), and an adapter reads a localized key's provenance with ``fetched(spec, key)`` /
``as_written(spec, key)``.

This package imports nothing of vlbias above the I/O layer (not the config, models, regions or
suites): the config's entries are listed by vlbias.suites.registry.weights_entries.
"""

from vlbias.weights.declarations import declared, kind_of, unused
from vlbias.weights.download import MAX_BYTES, hub_download
from vlbias.weights.lock import Lock
from vlbias.weights.record import (
    as_written,
    fetch,
    fetched,
    go_offline,
    localize,
    prepare,
    provenance,
    read_record,
    record_path,
    stale_records,
    unfetched,
    write_record,
)
from vlbias.weights.sources import (
    REMOTE,
    TORCHVISION_ARCHS,
    package_dir,
    remote_sources,
    request,
    torchvision_arch,
)

__all__ = [
    "MAX_BYTES", "REMOTE", "TORCHVISION_ARCHS", "Lock", "as_written",
    "declared", "fetch", "fetched", "go_offline", "hub_download", "kind_of", "localize", "package_dir", "prepare",
    "provenance", "read_record", "record_path", "remote_sources", "request", "stale_records", "torchvision_arch",
    "unfetched", "unused", "write_record",
]
