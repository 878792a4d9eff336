"""A headless browser for tests: render an HTML file in Chromium, get what a reader sees.

    browser = Browser.find()            # None when no chromium is installed
    seen = browser.render(Path("report.html"), screenshot=tmp_path / "page.png")
    assert "0.62*" in seen.text                                    # visible text (innerText)
    assert any(i["visible"] and i["loaded"] for i in seen.images)  # a figure drawn on the page

Chromium is run as a program (``--headless --dump-dom``), not driven over a protocol: a copy of
the page gets a script that, once the page has loaded, writes the body's innerText (text that
CSS hides is not in it) and every image's state (loaded, its drawn size, visible) into the DOM,
which --dump-dom prints. The copy sits in a temporary folder with a <base> pointing at the
original's folder, so relative links (figures) resolve as in the original.
"""

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PROBE_ID = "vlbias-probe"
PROBE = """<script>
window.addEventListener("load", () => {
  const seen = el => el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  const images = [...document.images].map(img => {
    const box = img.getBoundingClientRect();
    return {src: img.getAttribute("src"), loaded: img.complete && img.naturalWidth > 0,
            width: box.width, height: box.height, visible: seen(img) && box.width > 0 && box.height > 0};
  });
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "%s";
  out.textContent = JSON.stringify({text: document.body.innerText, images}).replaceAll("</", "<\\\\/");
  document.body.appendChild(out);
});
</script>
""" % PROBE_ID


@dataclass(frozen=True)
class Seen:
    text: str  # document.body.innerText after load
    images: list  # {src, loaded, width, height, visible} per <img>
    screenshot: Path | None


@dataclass(frozen=True)
class Browser:
    executable: str

    @classmethod
    def find(cls):
        """The system Chromium (Debian package ``chromium``), or None."""
        for name in ("chromium", "chromium-browser", "google-chrome"):
            if path := shutil.which(name):
                return cls(path)
        return None

    def _run(self, args, timeout):
        # --no-sandbox: the sandbox needs user namespaces, which containers and root often lack
        return subprocess.run([self.executable, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               *args], capture_output=True, text=True, timeout=timeout)

    def render(self, page, screenshot=None, size=(1280, 2000), timeout=60):
        """Load ``page`` (an HTML file) and return what is seen; with ``screenshot`` a path, also
        write a PNG of the first ``size`` (width, height) pixels there."""
        page = Path(page).resolve()
        html = page.read_text(encoding="utf-8")
        base = f'<base href="{page.parent.as_uri()}/">'
        html = re.sub(r"(<head[^>]*>)", r"\1" + base, html, count=1) if re.search(r"<head[^>]*>", html) \
            else base + html
        html = html.replace("</body>", PROBE + "</body>") if "</body>" in html else html + PROBE
        with tempfile.TemporaryDirectory() as tmp:
            probe = Path(tmp) / page.name
            probe.write_text(html, encoding="utf-8")
            # virtual time runs the page's scripts and the load event to the end before the dump
            dom = self._run(["--virtual-time-budget=10000", "--dump-dom", probe.as_uri()], timeout)
            if screenshot is not None:
                shot = self._run([f"--window-size={size[0]},{size[1]}", f"--screenshot={screenshot}",
                                  "--virtual-time-budget=10000", page.as_uri()], timeout)
                if not Path(screenshot).is_file():
                    raise RuntimeError(f"chromium wrote no screenshot: {shot.stderr[-1000:]}")
        found = re.search(rf'<script type="application/json" id="{PROBE_ID}">(.*?)</script>', dom.stdout, re.S)
        if found is None:
            raise RuntimeError(f"chromium did not run the probe on {page} (exit {dom.returncode}): "
                               f"{dom.stderr[-1000:]}")
        seen = json.loads(found.group(1))  # "<\/" in it is JSON for "</"
        return Seen(seen["text"], seen["images"], Path(screenshot) if screenshot else None)
