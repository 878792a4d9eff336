"""A headless browser for tests: render an HTML file in Chromium, get what a reader sees.

    browser = Browser.find()            # None when no chromium is installed
    seen = browser.render(Path("report.html"), screenshot=tmp_path / "page.png")
    assert "0.62*" in seen.text                                    # visible text (innerText)
    assert any(i["visible"] and i["loaded"] for i in seen.images)  # a figure drawn on the page

    # a page that needs a reader's clicks first (a single-page app such as Snakemake's report):
    seen = browser.render(page, script='await click("iEAT"); await until(() => find("table1"));')
    seen.frames[0]["text"]                                         # what an <iframe> shows

Chromium is run as a program (``--headless --dump-dom``), not driven over a protocol: a copy of
the page gets a script that, once the page has loaded, runs ``script`` (the body of an async
function, with the helpers ``find(text)``, ``click(text)``, ``sleep(ms)`` and
``until(predicate)``), then writes the body's innerText (text that CSS hides is not in it), every
image's state (loaded, its drawn size, visible) and every iframe's text and state into the DOM,
which --dump-dom prints. The copy sits in a temporary folder with a <base> pointing at the
original's folder, so relative links (figures) resolve as in the original. Web security is off
for these local pages so that the probe can read frames of other origins (a data: URL).
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
(() => {
const visible = el => {
  const box = el.getBoundingClientRect();
  return el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}) && box.width > 0 && box.height > 0;
};
const images = doc => [...doc.images].map(img => {
  const box = img.getBoundingClientRect();
  return {src: img.getAttribute("src"), loaded: img.complete && img.naturalWidth > 0,
          width: box.width, height: box.height, visible: visible(img)};
});
// the innermost visible element whose own text is exactly ``text`` (trimmed)
const find = text => [...document.querySelectorAll("body *")].reverse()
  .find(el => visible(el) && el.innerText !== undefined && el.innerText.trim() === text) || null;
const sleep = ms => new Promise(done => setTimeout(done, ms));
const until = async (predicate, ms = 5000) => {
  for (let t = 0; t < ms; t += 50) { const value = predicate(); if (value) return value; await sleep(50); }
  throw new Error("timed out waiting for " + predicate);
};
const click = async text => {
  const el = await until(() => find(text));
  (el.closest("a, button") || el).click();
  await sleep(100);
};
// under the <base> of the original's folder a link to "#" would leave the page: it only scrolls
document.addEventListener("click", e => { if (e.target.closest("a[href^='#']")) e.preventDefault(); }, true);
window.addEventListener("load", async () => {
  let error = null;
  try {
    await (async () => {
%(script)s
    })();
  } catch (e) { error = String(e); }
  const frames = [...document.querySelectorAll("iframe")].map(frame => {
    const box = frame.getBoundingClientRect();
    let doc = null;
    try { doc = frame.contentDocument; } catch (e) {}
    return {text: doc && doc.body ? doc.body.innerText : null, images: doc ? images(doc) : [],
            width: box.width, height: box.height, visible: visible(frame)};
  });
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "%(id)s";
  const width = document.documentElement.scrollWidth, viewport = window.innerWidth;
  out.textContent = JSON.stringify({text: document.body.innerText, images: images(document), frames, error,
                                    width, viewport})
    .replaceAll("</", "<\\\\/");
  document.body.appendChild(out);
});
})();
</script>
"""


@dataclass(frozen=True)
class Seen:
    text: str  # document.body.innerText after load (and after the script)
    images: list  # {src, loaded, width, height, visible} per <img>
    frames: list  # {text, images, width, height, visible} per <iframe> (text None where unreadable)
    screenshot: Path | None
    width: int = 0  # the page's width (its scrollWidth): wider than the viewport, a reader scrolls sideways
    viewport: int = 0  # the window's inner width


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

    def _run(self, args, profile, timeout):
        # --no-sandbox: the sandbox needs user namespaces, which containers and root often lack;
        # web security off (it needs a profile folder of its own): the probe reads every frame;
        # --disable-dev-shm-usage: a container's /dev/shm may be 64 MB, which a 4 MB report exhausts
        command = [self.executable, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   "--disable-dev-shm-usage", "--disable-web-security", *args]
        # headless Chromium now and then never ends a --virtual-time-budget run (a page that takes ~3 s
        # hung a CI run for 60): that is the browser's flake, not the page's, so a hung run is tried once
        # more in a fresh profile; a page that truly never settles hangs both times and fails
        for attempt in (1, 2):
            try:
                return subprocess.run([*command, f"--user-data-dir={profile}-{attempt}"], capture_output=True,
                                      text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                if attempt == 2:
                    raise

    def render(self, page, screenshot=None, size=(1280, 2000), script="", timeout=45):
        """Load ``page`` (an HTML file), run ``script`` (JavaScript: the body of an async function)
        once it has loaded, and return what is seen; with ``screenshot`` a path, also write a PNG
        of the first ``size`` (width, height) pixels there, taken after the script; the page is laid
        out in a window of that size either way."""
        page = Path(page).resolve()
        html = page.read_text(encoding="utf-8")
        base = f'<base href="{page.parent.as_uri()}/">'
        html = re.sub(r"(<head[^>]*>)", r"\1" + base, html, count=1) if re.search(r"<head[^>]*>", html) \
            else base + html
        probe_js = PROBE % {"script": script, "id": PROBE_ID}
        # before the last </body>: a page's scripts may hold the text "</body>" in a string
        end = html.rfind("</body>")
        html = html[:end] + probe_js + html[end:] if end >= 0 else html + probe_js
        with tempfile.TemporaryDirectory() as tmp:
            probe = Path(tmp) / page.name
            probe.write_text(html, encoding="utf-8")
            # virtual time runs the page's scripts and the load event to the end before the dump
            dom = self._run([f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=10000", "--dump-dom",
                             probe.as_uri()], Path(tmp, "profile"), timeout)
            if screenshot is not None:
                shot = self._run([f"--window-size={size[0]},{size[1]}", f"--screenshot={screenshot}",
                                  "--virtual-time-budget=10000", probe.as_uri()], Path(tmp, "profile"), timeout)
                if not Path(screenshot).is_file():
                    raise RuntimeError(f"chromium wrote no screenshot: {shot.stderr[-1000:]}")
        found = re.search(rf'<script type="application/json" id="{PROBE_ID}">(.*?)</script>', dom.stdout, re.S)
        if found is None:
            raise RuntimeError(f"chromium did not run the probe on {page} (exit {dom.returncode}): "
                               f"{dom.stderr[-1000:]}")
        seen = json.loads(found.group(1))  # "<\/" in it is JSON for "</"
        if seen["error"]:
            raise RuntimeError(f"the script on {page} failed: {seen['error']}")
        return Seen(seen["text"], seen["images"], seen["frames"], Path(screenshot) if screenshot else None,
                    seen["width"], seen["viewport"])
