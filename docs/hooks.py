"""MkDocs hooks (mkdocs.yml `hooks:`): the pages generated at build time, so that what they say is said
once, in its source: the configuration reference from the schemas (vlbias.schemas.reference), and the
contributing guide from CONTRIBUTING.md (kept at the root, where GitHub shows it; its links to docs/
rewritten to the site's pages); and a check of every page: a tag its HTML holds that no Markdown of
ours writes is a placeholder left unescaped (`<name>` outside a code span), which the browser drops
without a word: a warning, so `mkdocs build --strict` fails on it."""

import logging
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("mkdocs.plugins.vlbias")

# the tags Markdown, its extensions (tables, highlight, admonition, toc) and our pages' own HTML write
TAGS = {"a", "blockquote", "br", "code", "del", "details", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
        "img", "li", "ol", "p", "pre", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "th",
        "thead", "tr", "ul"}


def on_files(files, config):
    sys.path.insert(0, str(ROOT / "src"))  # the checkout's vlbias, whichever one is installed
    from vlbias.schemas.reference import reference

    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").replace("](docs/", "](")
    for name, content in (("configuration.md", reference(ROOT / "workflow/schemas/config.schema.yaml")),
                          ("contributing.md", contributing)):
        files.append(File.generated(config, name, content=content))
    return files


def on_page_content(html, page, config, files):
    if unknown := sorted(set(re.findall(r"</?([A-Za-z][\w-]*)", html)) - TAGS):
        log.warning("%s: %s: placeholders left as HTML tags (write them in a code span, or &lt; &gt;)",
                    page.file.src_uri, ", ".join(f"<{tag}>" for tag in unknown))
    return html
