"""Region features: a Faster R-CNN detector per family, built from a workflow config entry.

    detector = build({"adapter": "bua", "model_id": "unc-nlp/frcnn-vg-finetuned", ...})
    x = detector.prepare(rgb)                  # PIL RGB image -> CPU input (run in decode threads)
    regions = detector.detect([x, ...])        # -> list[vlbias.visual.Regions], one per image, in the detector's order

Every detector has ``name``, ``feature_dim``, ``class_names`` (index = ``Regions.class_ids``: class
0 is the first named class, never the background),
``attribute_names`` (None when the detector predicts no attributes), ``person_classes`` (the
class names whose boxes show people, for the image-masking experiment), ``weights`` (sha256 of
the weight file, or "random") and ``settings`` (a JSON-able dict of everything that shaped the
output). Boxes are kept by one rule for every detector (vlbias.visual.keep_boxes, bottom-up-attention's):
all boxes whose best class score is at least ``conf``, but at least ``min_boxes`` and at most
``max_boxes``; fixed K (LXMERT's 36) is ``min_boxes = max_boxes = K``.

Adapter modules are imported only when an entry names them (see vlbias.registry); a detector whose
network is ported here keeps it apart, in ``modeling_<adapter>`` (docs/architecture.md).
"""

from vlbias.registry import Registry

_ADAPTERS = Registry("detector", "vlbias.regions")  # adapter <name>: module vlbias.regions.<name>
register, build, build_recorded = _ADAPTERS.register, _ADAPTERS.build, _ADAPTERS.build_recorded
