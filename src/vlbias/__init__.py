"""vlbias: reproducible measurement of social bias in vision, language and vision-language models."""

__version__ = "0.1.0"

# A project's config and the workflow's schema of it, relative to the project's directory (the working
# directory of the workflow and of the command line): named here once for every module that reads or names them.
CONFIG = "config/config.yaml"
SCHEMA = "workflow/schemas/config.schema.yaml"
