"""index.html renders in a real headless browser with the right rows; the terminal tables read well."""

import json
import re
import shutil
import subprocess

import pytest

import mtp_tvm
from mtp_tvm.instrument.report import pass_table

ROW = re.compile(r'<tr class="pass[^"]*" data-index="(\d+)">')


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("chromium is not installed and could not be installed here (.ci/run installs the Debian "
                "package `chromium` before the tests)")


def _dom(page, fragment: str = "") -> str:
    """The DOM after the page's script ran, as headless Chromium renders it (no network involved)."""
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          f"{page.as_uri()}{fragment}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return mtp_tvm.compile(case="tail", preset="tiny", frontend="relax",
                           dump_passes=tmp_path_factory.mktemp("dumps")).dump_dir


def test_index_html_is_self_contained(run):
    page = (run / "index.html").read_text()
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no network: no remote script, style or font
    assert "<script src" not in page and "<link" not in page


def test_the_table_renders_one_row_per_pass_and_filters_by_phase_and_changed(run):
    passes = json.loads((run / "index.json").read_text())["passes"]
    page = run / "index.html"
    rows = [int(i) for i in ROW.findall(_dom(page))]
    assert rows == [p["index"] for p in passes]
    changed = [int(i) for i in ROW.findall(_dom(page, "#changed=1"))]
    assert changed == [p["index"] for p in passes if p["changed"]] and 0 < len(changed) < len(passes)
    fuse = [int(i) for i in ROW.findall(_dom(page, "#phase=fuse&changed=1"))]
    assert fuse == [p["index"] for p in passes if p["phase"] == "fuse" and p["changed"]] and fuse


def test_a_diff_is_shown_highlighted_with_links_to_the_files(run):
    passes = json.loads((run / "index.json").read_text())["passes"]
    legalize = next(p for p in passes if p["name"] == "LegalizeOps")
    dom = _dom(run / "index.html", f"#show={legalize['index']}")
    viewer = dom[dom.index('<section id="viewer"'):]
    assert viewer.startswith('<section id="viewer">')  # not hidden
    assert '<span class="d-add">' in viewer and '<span class="t-kw">def</span>' in viewer
    assert f'href="{legalize["file"]}"' in dom and f'href="{legalize["diff"]}"' in dom
    assert 'href="host.s"' in dom


def test_pass_table_marks_nested_and_skipped_passes(run, tmp_path):
    table = pass_table(json.loads((run / "index.json").read_text()))
    assert re.search(r"\n\d{3}  fuse +FuseTIR +changed", table)
    assert re.search(r"\n\d{3}  fuse +  ExpandTupleArguments ", table)  # run inside FuseTIR: indented
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", dump_passes=tmp_path, bisect_limit=0)
    table = pass_table(json.loads((m.dump_dir / "index.json").read_text()))
    assert re.search(r"FoldConstant +skipped \(bisect-limit\)", table)
    assert re.search(r"FuseTIR +skipped \(bisect-limit\)", table) and "ExpandTupleArguments" not in table
