"""vlbias weights: fetch the weights every model and detector entry of the config loads (each stage's
entries: vlbias.suites.registry.weights_entries), verify them against the lock and lock what was
resolved; or list what would be fetched and what is locked."""

import sys

from vlbias.cli.common import UsageError, config_option, load_config, schema_default
from vlbias.errors import InputError


def add_parser(sub):
    p = sub.add_parser("weights", help="fetch the weights the config's models load, and lock them",
                       description="Fetch every model and detector entry's weights (hub files, checkpoint and "
                                   "detector URLs, open_clip tags) into the cache, verify them against the lock "
                                   f"(the config's weights_lock, default {schema_default('weights_lock')}) and "
                                   "lock what was resolved. Entries are named <suite>/<name> (or <name> alone).")
    p.add_argument("names", nargs="*", metavar="NAME", help="entries (default: all)")
    p.add_argument("--update", action="store_true", help="resolve the entries anew and rewrite their lock entries")
    p.add_argument("--dry-run", action="store_true", help="list what would be fetched and what is locked; no network")
    config_option(p)
    p.set_defaults(func=main)


def main(args):
    from vlbias import weights as w
    from vlbias.suites.registry import weights_entries

    config = load_config(args.config)
    found = weights_entries(config)
    names = list(found)
    if args.names:
        unknown = [n for n in args.names if n not in found and not any(k.split("/", 1)[1] == n for k in found)]
        if unknown:
            raise UsageError(f"no weights entry {', '.join(unknown)}; configured: {', '.join(found) or 'none'}")
        names = [k for k in found if k in args.names or k.split("/", 1)[1] in args.names]
    lock = w.Lock(config["weights_lock"])
    failed = []
    for name in names:
        try:
            _entry(w, name, found[name], config, lock, args)
        except InputError as e:  # said, and the other entries fetched all the same
            print(f"vlbias weights: error: {name}: {e}", file=sys.stderr)
            failed.append(name)
    if not args.dry_run and len(failed) < len(names):
        print(f"lock: {lock.path}")
    if failed:
        print(f"vlbias weights: {len(failed)} of {len(names)} entries failed: {', '.join(failed)}", file=sys.stderr)
    return 2 if failed else 0


def _entry(w, name, spec, config, lock, args):
    """List (--dry-run) or fetch one entry's weights."""
    if args.dry_run:
        pins = (lock.entry(name) or {}).get("sources") or {}
        sources = w.remote_sources(spec, w.kind_of(name))
        print(f"{name} ({spec['adapter']})")
        for key, source in sources.items():
            print("\n".join(_describe(key, source, None if args.update else pins.get(key))))
        return
    record = w.fetch(name, spec, cache=config["cache"], lock_path=lock.path, update=args.update)
    files = [f for s in record["sources"].values() for f in s["files"].values()]
    print(f"{name}: {len(files)} file(s), {_size(sum(f['size'] for f in files))}, verified")
    path = w.record_path(name)
    # the workflow's record, where it differs (or is no record): rewritten, so that its model jobs run again
    if path.is_file():
        try:
            same = w.read_record(path) == record
        except InputError:
            same = False
        if not same:
            w.write_record(path, record)


def _size(n):
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _describe(key, source, pin):
    """Lines saying what one source of an entry loads, and what the lock pins of it."""
    kind = source["kind"]
    if kind == "random":
        return [f"  {key}: random weights, seed {source['seed']}"]
    if kind == "local":
        return [f"  {key}: local {source['request']} (sha256 recorded by the weights stage)"]
    what = {"hub": lambda s: f"hub {s['repo']} @ {s['revision'] or 'main'}",
            "url": lambda s: f"url {s['url']}",
            "open_clip": lambda s: f"open_clip {s['arch']} pretrained '{s['tag']}' ({s['origin']})",
            "torchvision": lambda s: f"torchvision {s['arch']} {s['enum']} ({s['url']})"}[kind](source)
    if pin:
        files = pin["files"]
        total = sum(f["size"] for f in files.values())
        lines = [f"  {key}: {what}" + (f" -> locked {pin['commit']}" if pin.get("commit") else " (locked)")
                 + f", {len(files)} file(s), {_size(total)}"]
        lines += [f"      {name}  {_size(f['size'])}  sha256 {f['sha256']}" for name, f in files.items()]
        return lines
    lines = [f"  {key}: {what} (not locked yet: resolved and locked on the first fetch)"]
    if kind == "url" and not source.get("sha256"):
        lines.append(f"  warning: {key}: no pinned sha256 in the config (the lock pins the file once fetched)")
    return lines
