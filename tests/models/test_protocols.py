"""Every model adapter in the registry implements the protocols of the roles its schema declares
(vlbias.models.protocols): each method with the protocol's parameters (names, kinds, defaults), each
attribute set. mypy (CI's `.venv/bin/mypy`) checks this file too: ``_static_roles`` below."""

import ast
import importlib
import inspect
import textwrap
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from vlbias import models
from vlbias.models import families
from vlbias.models.protocols import (
    ImageEncoder,
    MaskedLM,
    MultiOutputImageEncoder,
    TextEncoder,
    VisionLanguageEncoder,
    roles,
)
from vlbias.schemas import adapters

if TYPE_CHECKING:
    from vlbias.models.bert_mlm import BertMaskedLM
    from vlbias.models.blip import BlipEncoder
    from vlbias.models.bridgetower import BridgeTowerEncoder
    from vlbias.models.flava import FlavaEncoder
    from vlbias.models.hf_dual import DualEncoder
    from vlbias.models.igpt import IGPTEncoder
    from vlbias.models.lxmert import LxmertEncoder
    from vlbias.models.open_clip import OpenClipEncoder
    from vlbias.models.sentence import SentenceEncoder
    from vlbias.models.simclr import SimCLREncoder
    from vlbias.models.vilt import ViltEncoder
    from vlbias.models.vilbert import ViLBertEncoder
    from vlbias.models.visualbert import VisualBertEncoder
    from vlbias.models.vlbert import VLBertEncoder

    def _static_roles(bert_mlm: BertMaskedLM, blip: BlipEncoder, bridgetower: BridgeTowerEncoder,
                      flava: FlavaEncoder, hf_dual: DualEncoder, igpt: IGPTEncoder, lxmert: LxmertEncoder,
                      open_clip: OpenClipEncoder, sentence: SentenceEncoder, simclr: SimCLREncoder,
                      vilbert: ViLBertEncoder, vilt: ViltEncoder, visualbert: VisualBertEncoder,
                      vlbert: VLBertEncoder) -> None:
        """The same contract as mypy sees it (members present, arity, attribute types where a class
        states them); the runtime test below also checks parameter names and defaults, which mypy
        does not compare."""
        images: list[ImageEncoder] = [hf_dual, igpt, open_clip, simclr]
        texts: list[TextEncoder] = [hf_dual, open_clip, sentence]
        several: list[MultiOutputImageEncoder] = [igpt]
        grounded: list[VisionLanguageEncoder] = [bert_mlm, blip, bridgetower, flava, lxmert, vilbert, vilt,
                                                 visualbert, vlbert]
        mlm: list[MaskedLM] = [bert_mlm, bridgetower, flava, lxmert, vilbert, vilt, visualbert, vlbert]
        del images, texts, several, grounded, mlm


def members(protocol: type) -> tuple[dict[str, Any], set[str]]:
    """({method name: function}, attribute names) of ``protocol`` and the protocols it extends."""
    methods: dict[str, Any] = {}
    attributes: set[str] = set()
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        methods |= {k: v for k, v in vars(klass).items() if inspect.isfunction(v) and not k.startswith("_")}
        attributes |= set(vars(klass).get("__annotations__", {}))
    return methods, attributes


def assigned(cls: type) -> set[str]:
    """The attributes ``cls`` (or a base) sets on ``self`` in any of its methods, read from the source."""
    names = set()
    for klass in cls.__mro__[:-1]:
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(klass)))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _parameters(function: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


def _plain(function: Any) -> str:
    """``function``'s parameters as written, without annotations (for messages)."""
    signature = inspect.signature(function)
    return str(signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                                 return_annotation=signature.empty))


def mismatches(cls: type, protocol: type) -> list[str]:
    """How ``cls`` falls short of ``protocol``: a missing method or attribute, a parameter of another
    name, kind or default than the protocol's (in its place), a required one the protocol lacks."""
    methods, attributes = members(protocol)
    found = [f"no attribute {name}" for name in sorted(attributes - assigned(cls)) if not hasattr(cls, name)]
    for name, want in methods.items():
        have = getattr(cls, name, None)
        if not callable(have):
            found.append(f"no method {name}")
            continue
        theirs, ours = _parameters(want), _parameters(have)
        where = f"{cls.__name__}.{name}{_plain(have)} for {protocol.__name__}.{name}{_plain(want)}"
        for i, w in enumerate(theirs):
            h = ours[i] if i < len(ours) else None
            if h is None or (h.name, h.kind) != (w.name, w.kind):
                found.append(f"{where}: parameter {i + 1} is not {w.kind.description} '{w.name}'")
                break
            if w.default is not w.empty and (h.default is h.empty or h.default != w.default):
                have_default = "has no default" if h.default is h.empty else f"defaults to {h.default!r}"
                found.append(f"{where}: '{w.name}' {have_default}, not {w.default!r}")
        else:
            extra = [p.name for p in ours[len(theirs):] if p.default is p.empty
                     and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if extra:
                found.append(f"{where}: required parameter(s) {', '.join(extra)} beyond the protocol's")
    return found


def adapter_class(adapter: str) -> type:
    importlib.import_module(f"vlbias.models.{adapter}")  # registers it (vlbias.registry's convention)
    return models._ADAPTERS.classes[adapter]


@pytest.mark.parametrize("adapter", adapters("models"))
def test_each_adapter_implements_the_roles_its_schema_declares(adapter):
    cls = adapter_class(adapter)
    declared = roles(families.family(adapter))
    assert declared, adapter
    for protocol in declared:
        assert mismatches(cls, protocol) == [], f"{adapter} as {protocol.__name__}"


def test_roles_follow_the_family_declaration():
    assert roles({"embeds": ["images", "texts"]}) == [ImageEncoder, TextEncoder]
    assert roles({"embeds": ["texts"]}) == [TextEncoder]
    assert roles({"embeds": ["images"], "outputs": {"hidden": "layer{layer}"}}) == [ImageEncoder,
                                                                                    MultiOutputImageEncoder]
    assert roles({}) == [VisionLanguageEncoder, MaskedLM]
    assert roles({"mlm_head": False, "ws_vectors": ["language"]}) == [VisionLanguageEncoder]
    # the schemas as shipped: BLIP's retrieval model has no masked-LM head, iGPT several outputs
    assert MaskedLM not in roles(families.family("blip")) and VisionLanguageEncoder in roles(families.family("blip"))
    assert MultiOutputImageEncoder in roles(families.family("igpt"))


class _Good:
    info: dict = {}
    dim = 4

    def encode_images(self, pixels, batch=1):  # a further parameter with a default is allowed
        return pixels


class _Renamed(_Good):
    def encode_images(self, images): ...


class _KeywordOnly(_Good):
    def encode_images(self, *, pixels): ...


class _Fewer(_Good):
    def encode_images(self): ...


class _MoreRequired(_Good):
    def encode_images(self, pixels, batch): ...


class _NoMethod(_Good):
    encode_images = None  # type: ignore[assignment]


class _OtherDefault(_Good):
    info: dict = {}
    tokenizer = None

    def mask_logprobs(self, captions, regions=None, mask="T", mask_terms=None, tokens=None, fill=None): ...


@pytest.mark.parametrize("cls,protocol,problem", [
    (_Renamed, ImageEncoder, "parameter 1 is not positional or keyword 'pixels'"),
    (_KeywordOnly, ImageEncoder, "parameter 1 is not positional or keyword 'pixels'"),
    (_Fewer, ImageEncoder, "parameter 1 is not positional or keyword 'pixels'"),
    (_MoreRequired, ImageEncoder, "required parameter(s) batch beyond the protocol's"),
    (_NoMethod, ImageEncoder, "no method encode_images"),
    (_OtherDefault, MaskedLM, "'mask' defaults to 'T', not None"),
])
def test_a_changed_signature_is_caught(cls, protocol, problem):
    assert mismatches(_Good, ImageEncoder) == []
    found = mismatches(cls, protocol)
    assert len(found) == 1 and problem in found[0], found


def test_an_attribute_never_set_is_caught():
    class Unset:
        def __init__(self):
            self.info = {}

        def encode_images(self, pixels): ...

    assert mismatches(Unset, ImageEncoder) == ["no attribute dim"]
    Unset.dim = 4
    assert mismatches(Unset, ImageEncoder) == []


def test_every_adapter_is_in_the_static_roles_with_its_class():
    # mypy checks the roles only of the families _static_roles names: one left out would go unchecked
    source = ast.parse(inspect.getsource(importlib.import_module(__name__)))
    static = next(node for node in ast.walk(source) if isinstance(node, ast.FunctionDef) and node.name == "_static_roles")
    named = {a.arg: ast.unparse(a.annotation) for a in static.args.args}
    assert named == {adapter: adapter_class(adapter).__name__ for adapter in adapters("models")}
