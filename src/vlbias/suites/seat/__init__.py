"""The SEAT/WEAT suite (May et al. 2019): text stimuli -> one embedding store per model (its planning:
plan; its descriptor: suite; the store itself: vlbias.suites.stores.embed_stimuli)."""
