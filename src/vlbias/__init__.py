"""vlbias: reproducible measurement of social bias in vision, language and vision-language models."""

__version__ = "0.1.0"
