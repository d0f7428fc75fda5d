"""Fetch a source distribution from the package index pip is configured with, without building it.

`pip download --no-binary :all:` prepares the sdist's metadata, which builds its build requirements
from source too (for mpi4py: Cython, minutes on two cores). The yardsticks need only the archive:
this reads the index's simple page (PEP 503) for the file, downloads it and checks its sha256.
"""
import hashlib
import html.parser
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request

TIMEOUT_S = 20  # each request; an index that stalls fails fast instead of holding a test


class Unavailable(Exception):
    """The sdist could not be had; the message says from where and why."""


def index_urls():
    """The simple indexes pip would use: PIP_INDEX_URL / index-url (else PyPI), then the extra ones."""
    config = {}
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():  # e.g. global.extra-index-url='file:///a file:///b'
        m = re.match(r"[\w:.-]*?\.?(index-url|extra-index-url)='(.*)'$", line.strip())
        if m:
            config.setdefault(m.group(1), []).extend(m.group(2).split())
    main = os.environ.get("PIP_INDEX_URL", "").split() or config.get("index-url") or ["https://pypi.org/simple"]
    extra = os.environ.get("PIP_EXTRA_INDEX_URL", "").split() + config.get("extra-index-url", [])
    return list(dict.fromkeys(main + extra))


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _get(url):
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
        return r.read()


def fetch(name, version, dest, indexes=None):
    """Download NAME-VERSION.tar.gz into `dest` (a pathlib.Path) from the first index that has it.

    Returns its path. Raises Unavailable naming every index tried and what each answered."""
    filename = f"{name}-{version}.tar.gz"
    target = dest / filename
    if target.exists():
        return target
    tried = []
    for index in indexes or index_urls():
        page = index.rstrip("/") + f"/{name}/"
        try:
            parser = _Links()  # a file:// index is a tree of directories, each page its index.html (as pip reads it)
            parser.feed(_get(page + "index.html" if page.startswith("file:") else page).decode("utf-8", "replace"))
        except Exception as err:  # noqa: BLE001 - any failure of this index is reported, the next one tried
            tried.append(f"{page}: {type(err).__name__}: {err}")
            continue
        link = next((h for h in parser.hrefs if urllib.parse.urlsplit(h).path.endswith("/" + filename)
                     or urllib.parse.urlsplit(h).path == filename), None)
        if link is None:
            tried.append(f"{page}: lists no {filename}")
            continue
        url = urllib.parse.urljoin(page, link)
        want = dict(p.split("=", 1) for p in urllib.parse.urlsplit(url).fragment.split("&") if "=" in p)
        try:
            data = _get(url.split("#")[0])
        except Exception as err:  # noqa: BLE001
            tried.append(f"{url}: {type(err).__name__}: {err}")
            continue
        if "sha256" in want and hashlib.sha256(data).hexdigest() != want["sha256"]:
            tried.append(f"{url}: sha256 differs from the index's")
            continue
        dest.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(data)
        os.replace(partial, target)
        return target
    raise Unavailable(f"no index gave {filename}: " + "; ".join(tried))
