"""MkDocs hooks (mkdocs.yml `hooks:`): the pages generated at build time, so that what they say is said
once, in its source: the configuration reference from the schemas (vlbias.schemas.reference), and the
contributing guide from CONTRIBUTING.md (kept at the root, where GitHub shows it; its links to docs/
rewritten to the site's pages)."""

import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def on_files(files, config):
    sys.path.insert(0, str(ROOT / "src"))  # the checkout's vlbias, whichever one is installed
    from vlbias.schemas.reference import reference

    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").replace("](docs/", "](")
    for name, content in (("configuration.md", reference(ROOT / "workflow/schemas/config.schema.yaml")),
                          ("contributing.md", contributing)):
        files.append(File.generated(config, name, content=content))
    return files
