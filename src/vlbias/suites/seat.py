"""The SEAT/WEAT suite (May et al. 2019): text stimuli → a per-test embedding store."""

from vlbias.io.store import write_embeddings


def embed_stimulus(stimulus, encoder, out, provenance):
    """Encode each set's items (words or sentences) of one test; one group per set X, Y, A, B."""
    sets = {st.key: (encoder.encode_texts(list(st.items)), list(st.items)) for st in stimulus.sets.values()}
    write_embeddings(out, sets, {**encoder.info, **provenance, "stimulus": stimulus.path,
                                 "level": stimulus.level})
