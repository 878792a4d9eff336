"""Grounded WEAT/SEAT (Ross, Katz & Barbu 2021): ``stimulus`` (the loader of the stimulus files),
``convert`` (their one-off conversion from the authors' upstream files), ``sources`` (the
acquisition manifests of their COCO and Conceptual Captions images), ``jobs`` (the workflow's
embedding and experiment jobs)."""
