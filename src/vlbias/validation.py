"""JSON-schema validation with one-line messages: the workflow's config (vlbias.config) and every input
file validated against a schema (stimulus files: vlbias.io.stimuli) say a mistake the same way.

    problems(doc, schema)   # ["key 'Aa': unknown key (did you mean 'A'?)", ...], [] when valid

Each line names the key by its path ("ieat/models/clip/poolng") and what is wrong with it: an unknown
key with the closest valid key (or the valid keys), a wrong type, a value not among the allowed ones
with the closest. A required key that an unknown key's suggestion already names is not said twice.
"""

import difflib
import math
import re

import jsonschema

_END = re.compile(r"(?<!\\)\$")


def _pattern(validator, pattern, instance, schema):
    # JSON Schema's `$` (ECMA-262) matches only at the end of the string; Python's `re` also before a
    # final newline, which let a model name "vx\n" through (and into a file name): `$` read as `\Z`
    if validator.is_type(instance, "string") and not re.search(_END.sub(r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _finite_number(checker, instance):
    # YAML's .nan and .inf are floats, which JSON Schema counts as numbers, and a NaN passes every
    # minimum and maximum: `alpha: .nan` reached the statistics; a configured number is a finite one
    return jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(instance, "number") and math.isfinite(instance)


# the validator of every schema: the config's and the input files'
Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _pattern},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("number", _finite_number))


def key_path(parts):
    return "/".join(str(p) for p in parts) or "(top level)"


def suggest(name, candidates):
    """' (did you mean 'x'?)' for the closest of ``candidates`` to ``name``, or ''."""
    close = _closest(name, candidates)
    return f" (did you mean '{close}'?)" if close else ""


def _closest(name, candidates):
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.6)
    return close[0] if close else None


def _unknown(error):
    """[(unknown key, closest known key or None)] of an additionalProperties error."""
    known = list(error.schema.get("properties", {}))
    patterns = error.schema.get("patternProperties", {})
    return [(k, _closest(k, known)) for k in error.instance
            if k not in known and not any(re.search(p, k) for p in patterns)]


def describe(error, where=()):
    """One line for one jsonschema error: the key's path (below ``where``), then what is wrong with it."""
    path = (*where, *error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        return "; ".join(f"key '{key_path((*path, k))}': unknown key"
                         + (f" (did you mean '{close}'?)" if close else f"; valid keys: {', '.join(known)}")
                         for k, close in _unknown(error))
    if error.validator in ("oneOf", "anyOf") and error.context:
        return describe(jsonschema.exceptions.best_match(error.context), where)
    if error.validator == "required":
        return f"key '{key_path(path)}': {error.message}"
    value = error.instance if not isinstance(error.instance, (dict, list)) else type(error.instance).__name__
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        if isinstance(value, float) and not math.isfinite(value):
            expected = f"a finite {expected}"
        return f"key '{key_path(path)}': expected {expected}, got {value!r}"
    if error.validator == "enum":
        return (f"key '{key_path(path)}': {value!r} is not one of {error.validator_value}"
                f"{suggest(value, error.validator_value)}")
    return f"key '{key_path(path)}': {error.message}"


def problems(instance, schema, where=(), validator=Validator):
    """One line per problem of ``instance`` against ``schema`` (``describe``), in key order; [] when valid."""
    errors = sorted(validator(schema).iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    suggested = {(tuple(e.absolute_path), close) for e in errors
                 if e.validator == "additionalProperties" and isinstance(e.instance, dict) for _, close in _unknown(e)}
    errors = [e for e in errors if not any((tuple(e.absolute_path), k) in suggested for k in _missing(e))]
    return [line for e in errors if (line := describe(e, where))]


def _missing(error):
    """The keys a `required` error says are missing (a oneOf/anyOf error: any branch's at its own path)."""
    if error.validator == "required":
        return {m.group(1)} if (m := re.match(r"'(.+)' is a required property$", error.message)) else set()
    if error.validator in ("oneOf", "anyOf"):
        return {k for e in error.context or () if not e.relative_path for k in _missing(e)}
    return set()
