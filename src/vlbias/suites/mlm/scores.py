"""Association scores S(E, g) and bias scores B(E) of Srinivasan & Bisk (2022), section 3.

With lp(E | agent, I) = ln P([MASK] = E | template with the agent word, image I) (vlbias.suites.mlm.probability),
agent g in {female, male} (woman, man) and the neutral agent p (person), no image written ``-``:

    S_PT(E, g) = lp_VL(E | g, -) - lp_L(E | g, -)                       pre-training (L: text-only BERT)
    S_L(E, g)  = mean_{I in I_E} [ lp_VL(E | g, I) - lp_VL(E | p, I) ]   language context
    S_V(E, g)  = ln mean_{I in I_g} P_VL(E | p, I) - lp_VL(E | p, -)     visual context
    B(E)       = S(E, female) - S(E, male)                               positive: female association

I_E = I_female u I_male are the images of E; I_g those showing an agent of gender g. Section 5's
language bias of an entity list is text-only: S_L(E, g) with no image, so
B_L(E) = lp(E | female, -) - lp(E | male, -), for the VL model and for BERT.

The log-probabilities travel as a table (``QUERY_COLUMNS``, one row per query), so the model jobs
and the scoring are separate steps and every number of a score is on record.
"""

import math

import numpy as np
import pandas as pd

from vlbias.errors import InputError
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.suites.mlm.probability import Query, entity_logprobs, entity_pieces
from vlbias.suites.mlm.stimuli import AGENTS, GENDERS

QUERY_COLUMNS = ["stimulus", "entity", "agent", "image", "image_entity", "image_gender", "caption", "pieces",
                 "logprob"]
NO_IMAGE = ""  # the image column of a query without visual input


# --- the scores on log-probabilities ------------------------------------------------------------

def s_pt(lp_vl, lp_l):
    """ln P_VL(E|g) / P_L(E|g)."""
    return lp_vl - lp_l


def s_l(lp_agent, lp_neutral):
    """Mean over images of ln P(E|g,I) / P(E|p,I); NaN without images."""
    lp_agent, lp_neutral = np.asarray(lp_agent, float), np.asarray(lp_neutral, float)
    if lp_agent.shape != lp_neutral.shape:
        raise ValueError(f"one log-probability per image for each agent, got {lp_agent.shape} and {lp_neutral.shape}")
    return float(np.mean(lp_agent - lp_neutral)) if lp_agent.size else math.nan


def s_v(lp_images, lp_no_image):
    """ln (mean over images of P(E|p,I)) / P(E|p); NaN without images."""
    lp_images = np.asarray(lp_images, float)
    if not lp_images.size:
        return math.nan
    return float(np.logaddexp.reduce(lp_images) - math.log(lp_images.size) - lp_no_image)


def bias(s_female, s_male):
    """B(E) = S(E, female) - S(E, male): positive = the entity leans female, negative = male."""
    return s_female - s_male


# --- queries and the log-probability table ------------------------------------------------------

def plan_queries(stimulus, images=()):
    """The rows (without logprob) and Queries one model needs for ``stimulus``.

    Every entity with each agent and no image; and, per image (vlbias.suites.mlm.stimuli.ImageRow) of an
    entity: the entity with each agent, and its contrasting entity with the neutral agent (same
    template; for the listing of images whose prediction contradicts them).
    """
    rows = []

    def add(entity, agent, caption_of, image=None):
        caption = stimulus.caption(caption_of, agent)
        rows.append(({"stimulus": stimulus.id, "entity": entity, "agent": agent,
                      "image": NO_IMAGE if image is None else image.id,
                      "image_entity": "" if image is None else image.entity,
                      "image_gender": "" if image is None else image.gender, "caption": caption},
                     Query(caption, entity, None if image is None else image.id)))

    for e in stimulus.entities:
        for agent in AGENTS:
            add(e.entity, agent, e.entity)
    for image in images:
        e = stimulus.entity(image.entity)
        for agent in AGENTS:
            add(e.entity, agent, e.entity, image)
        if e.contrast:
            add(e.contrast, "neutral", e.entity, image)
    return rows


def logprob_table(model, stimuli, images=None, visuals=None, cache=None):
    """DataFrame (QUERY_COLUMNS) of ``model``'s log-probabilities for ``stimuli``.

    ``images``: {stimulus id: [ImageRow]} of the images to query (their regions in ``visuals``);
    ``cache``: see vlbias.suites.mlm.probability.entity_logprobs.
    """
    planned = []
    for stimulus in stimuli:
        planned += plan_queries(stimulus, (images or {}).get(stimulus.id, ()))
    lp = entity_logprobs(model, [q for _, q in planned], visuals, cache)
    pieces = {e: " ".join(model.tokenizer.convert_ids_to_tokens(entity_pieces(model.tokenizer, e)))
              for e in {row["entity"] for row, _ in planned}}
    rows = [{**row, "pieces": pieces[row["entity"]], "logprob": value} for (row, _), value in zip(planned, lp)]
    return pd.DataFrame(rows, columns=QUERY_COLUMNS)


def write_logprob_table(path, df, comments=()):
    """Write a log-probability table as TSV (atomically), ``comments`` first (e.g. the model's provenance)."""
    write_manifest(path, df.to_dict("records"), QUERY_COLUMNS, comments=comments)


def read_logprob_table(path):
    """A table written by ``write_logprob_table``, logprob as float."""
    df = pd.DataFrame(read_manifest(path), columns=QUERY_COLUMNS)
    return df.assign(logprob=df["logprob"].astype(float))


class LogProbs:
    """Look-ups into a log-probability table of one stimulus: ``lp(entity, agent, image)``, ``images(...)``."""

    def __init__(self, df, stimulus, name):
        df = df[df["stimulus"] == stimulus]
        self.name = name
        keys = list(zip(df["entity"], df["agent"], df["image"].fillna(NO_IMAGE)))
        self._lp = dict(zip(keys, df["logprob"].astype(float)))
        if len(self._lp) != len(keys):
            raise InputError(name, f"lists a query of stimulus '{stimulus}' twice")
        shown = df[(df["image"].fillna(NO_IMAGE) != NO_IMAGE) & (df["entity"] == df["image_entity"])
                   & (df["agent"] == "neutral")]
        self._images = {}
        for image, entity, gender in zip(shown["image"], shown["image_entity"], shown["image_gender"]):
            self._images.setdefault((entity, gender), []).append(image)

    def lp(self, entity, agent, image=NO_IMAGE):
        try:
            return self._lp[(entity, agent, image)]
        except KeyError:
            raise InputError(self.name, f"has no log-probability of '{entity}' with agent {agent} and "
                                        f"{'image ' + image if image else 'no image'}") from None

    def images(self, entity, gender=None):
        """The images of ``entity`` (showing an agent of ``gender``, or both), sorted."""
        genders = GENDERS if gender is None else (gender,)
        return sorted(i for g in genders for i in self._images.get((entity, g), []))


# --- the tables ---------------------------------------------------------------------------------

SCORE_COLUMNS = ["entity", "stereotype", "gender", "S_PT", "S_L", "n_L", "S_V", "n_V"]
BIAS_COLUMNS = ["entity", "stereotype", "B_PT", "B_L", "B_V", "n_female", "n_male"]
CONTRADICTION_COLUMNS = ["image", "entity", "gender", "contrast", "p_entity", "p_contrast", "contradicts"]
ENTITY_COLUMNS = ["entity", "stereotype", "S_L_female", "S_L_male", "B_L", "B_L_ref", "B_L_diff"]


def association_scores(vl, ref, stimulus):
    """Per entity and gender: S_PT, S_L (over n_L images), S_V (over n_V images) (``vl``, ``ref``: LogProbs)."""
    rows = []
    for e in stimulus.entities:
        images = vl.images(e.entity)
        for g in GENDERS:
            own = vl.images(e.entity, g)
            rows.append({
                "entity": e.entity, "stereotype": e.stereotype, "gender": g,
                "S_PT": s_pt(vl.lp(e.entity, g), ref.lp(e.entity, g)),
                "S_L": s_l([vl.lp(e.entity, g, i) for i in images], [vl.lp(e.entity, "neutral", i) for i in images]),
                "n_L": len(images),
                "S_V": s_v([vl.lp(e.entity, "neutral", i) for i in own], vl.lp(e.entity, "neutral")),
                "n_V": len(own),
            })
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def bias_scores(scores):
    """Per entity: B = S(female) - S(male) of each source, from ``association_scores``' table."""
    rows = []
    for entity, group in scores.groupby("entity", sort=False):
        by = group.set_index("gender")
        rows.append({"entity": entity, "stereotype": by["stereotype"].iloc[0],
                     **{f"B_{s}": bias(by.at["female", f"S_{s}"], by.at["male", f"S_{s}"]) for s in ("PT", "L", "V")},
                     "n_female": int(by.at["female", "n_V"]), "n_male": int(by.at["male", "n_V"])})
    return pd.DataFrame(rows, columns=BIAS_COLUMNS)


def contradictions(vl, stimulus):
    """Per image of an entity with a contrasting entity: P(entity | person, I) and P(contrast | person, I);
    ``contradicts`` when the model prefers the entity the image does not show (the paper's Table 3)."""
    rows = []
    for e in stimulus.entities:
        if not e.contrast:
            continue
        for g in GENDERS:
            for image in vl.images(e.entity, g):
                p, q = math.exp(vl.lp(e.entity, "neutral", image)), math.exp(vl.lp(e.contrast, "neutral", image))
                rows.append({"image": image, "entity": e.entity, "gender": g, "contrast": e.contrast,
                             "p_entity": p, "p_contrast": q, "contradicts": q > p})
    return pd.DataFrame(rows, columns=CONTRADICTION_COLUMNS)


def entity_bias(vl, ref, stimulus):
    """Section 5: per entity, the text-only language scores S_L(E, g) of the VL model, its B_L, BERT's
    B_L (``B_L_ref``) and B_L - B_L_ref (negative: VL pre-training moved the entity towards male)."""
    rows = []
    for e in stimulus.entities:
        s_vl, s_ref = ({g: s_l([m.lp(e.entity, g)], [m.lp(e.entity, "neutral")]) for g in GENDERS} for m in (vl, ref))
        b_vl, b_ref = bias(s_vl["female"], s_vl["male"]), bias(s_ref["female"], s_ref["male"])
        rows.append({"entity": e.entity, "stereotype": e.stereotype, "S_L_female": s_vl["female"],
                     "S_L_male": s_vl["male"], "B_L": b_vl, "B_L_ref": b_ref, "B_L_diff": b_vl - b_ref})
    return pd.DataFrame(rows, columns=ENTITY_COLUMNS)
