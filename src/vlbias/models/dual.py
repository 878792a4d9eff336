"""What the hf_dual adapter and the zoo's sizes (vlbias.suites.zoo.metadata) share about the Hugging Face dual
encoders: the model and config class of each ``architecture``, and the width of a model's joint space."""

from transformers import (BlipConfig, BlipForImageTextRetrieval, CLIPConfig, CLIPModel, FlavaConfig, FlavaModel,
                          Siglip2Config, Siglip2Model, SiglipConfig, SiglipModel)

ARCHITECTURES = {"clip": (CLIPModel, CLIPConfig), "siglip": (SiglipModel, SiglipConfig),
                 "siglip2": (Siglip2Model, Siglip2Config), "blip": (BlipForImageTextRetrieval, BlipConfig),
                 "flava": (FlavaModel, FlavaConfig)}


def joint_width(model):
    """The width of a dual encoder's joint space (its vectors'): BLIP's ITC projections'; CLIP-like models' (and
    FLAVA's) projection_dim, to which both towers project; SigLIP's towers share the vision width."""
    config = model.config
    if isinstance(model, BlipForImageTextRetrieval):
        return int(config.image_text_hidden_size)
    return int(getattr(config, "projection_dim", None) or config.vision_config.hidden_size)
