"""The grounded protocol presets (vlbias.suites.grounded.protocol): each switch resolves, routes to
the part of the pipeline it acts in, and rejects what it does not know."""

import pytest

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.suites.grounded.protocol import PRESETS, SWITCHES, encoder_options, resolve


def test_presets_set_every_switch_to_its_papers_or_authors_value():
    assert set(PRESETS["paper"]) == set(PRESETS["authors"]) == set(SWITCHES)
    assert PRESETS["paper"] == {"visualbert": "paper", "ws_vector": "language", "masked_statistic": "2",
                                "image_mask": "persons", "token_mask": "piece", "caption_indices": "number",
                                "vilbert_padding": "masked", "vilbert_image_mask": "regions",
                                "vlbert_image_box": "whole", "vlbert_box_padding": "masked",
                                "vlbert_image_mask": "learned", "label_offset": 0, "region_source": "detector"}
    assert PRESETS["authors"] == {"visualbert": "authors", "ws_vector": "language+visual", "masked_statistic": "1",
                                  "image_mask": "labels", "token_mask": "word", "caption_indices": "digits",
                                  "vilbert_padding": "attended", "vilbert_image_mask": "in_place",
                                  "vlbert_image_box": "none", "vlbert_box_padding": "attended",
                                  "vlbert_image_mask": "zeroed", "label_offset": -1, "region_source": "released"}
    assert sorted(s.row for s in SWITCHES.values()) == [1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # row 2 is no switch


def test_one_switch_flipped_changes_that_switch_only():
    flipped = resolve({"preset": "paper", "token_mask": "word"})
    assert flipped == {**PRESETS["paper"], "token_mask": "word"}
    assert resolve("authors") == PRESETS["authors"]


@pytest.mark.parametrize("protocol, message", [
    ("author", "protocol preset 'author': must be one of paper, authors"),
    ({"token_mask": "word"}, "protocol: expected a preset name"),
    ({"preset": "paper", "tokens": "word"}, "protocol switch 'tokens': unknown"),
    ({"preset": "paper", "masked_statistic": 1}, "protocol switch 'masked_statistic': is 1; must be one of '2', '1'"),
])
def test_bad_protocols_are_named(protocol, message):
    with pytest.raises(InputError, match=message):
        resolve(protocol)


def test_encoder_options_build_the_encoders():
    authors = resolve("authors")
    assert encoder_options(authors, "visualbert") == {"token_mask": "word"}
    assert encoder_options(authors, "lxmert") == {"token_mask": "word", "ws_vector": "language+visual"}
    assert encoder_options(authors, "vilbert") == {"token_mask": "word", "ws_vector": "language+visual",
                                                   "vilbert_padding": "attended", "vilbert_image_mask": "in_place"}
    assert encoder_options(resolve("paper"), "vlbert") == {"token_mask": "piece", "vlbert_image_box": "whole",
                                                           "vlbert_box_padding": "masked",
                                                           "vlbert_image_mask": "learned"}
    assert encoder_options(authors, "vlbert", {"image_feat_precomputed": False}) == {"token_mask": "word"}
    assert encoder_options(authors, "vlbert", {"image_feat_precomputed": True})["vlbert_image_box"] == "none"
    spec = {"adapter": "lxmert", "weights": "random", "device": "cpu",
            "config": {"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 20, "l_layers": 1,
                       "x_layers": 1, "r_layers": 1, "num_qa_labels": 2, "visual_feat_dim": 8}}
    encoder = build({**spec, **encoder_options(authors, "lxmert")})
    assert encoder.info["token_mask"] == "word" and encoder.output_dim("S") == 32
    paper = build({**spec, **encoder_options(resolve("paper"), "lxmert")})
    assert paper.info["ws_vector"] == "language" and paper.output_dim("S") == 16


def test_each_feed_a_family_declares_is_a_protocol_switch_with_its_values():
    """A family's declared feeds (its schema file) are switches of the protocol, the family's own value
    the paper's; the W/S switch's values are those the two-stream families declare."""
    from vlbias.schemas import adapters
    from vlbias.models.families import feeds, ws_vectors

    declared = {a: feeds(a) for a in adapters("models") if feeds(a)}
    assert sorted(declared) == ["vilbert", "vlbert"]
    for family, options in declared.items():
        for name, values in options.items():
            assert SWITCHES[name].values == values, (family, name)
    two_streams = ["bridgetower", "lxmert", "vilbert"]
    assert [a for a in adapters("models") if len(ws_vectors(a)) > 1] == two_streams
    assert all(ws_vectors(a) == SWITCHES["ws_vector"].values for a in two_streams)
