"""index.html renders in a real headless browser with the right rows; the terminal tables read well."""

import html.parser
import json
import re
import shutil
import subprocess

import pytest

import mtp_tvm
from helpers import INT32_ACCUMULATOR_PLUGIN
from mtp_tvm.instrument.report import pass_table

# every test reads a build with dumps (seconds each); test_html_page keeps the page in the fast loop
pytestmark = pytest.mark.slow

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
    every = json.loads((run / "index.json").read_text())["passes"]
    passes = [p for p in every if p["depth"] == 0]  # the passes run inside another are folded under it
    assert len(passes) < len(every)
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


STEP = re.compile(r'<div class="step" data-step="(\d+)">')


def _most_changed(run, index: dict) -> str:
    from mtp_tvm.instrument.kernel_history import histories

    return max(histories(run, index).items(), key=lambda kv: len(kv[1]))[0]


def test_the_kernel_history_shows_one_function_through_its_passes_side_by_side(run):
    from mtp_tvm.instrument.kernel_history import kernel_history

    index = json.loads((run / "index.json").read_text())
    func = _most_changed(run, index)
    steps = kernel_history(run, index, func).steps
    dom = _dom(run / "index.html", f"#func={func}")
    section = _history_section(dom)
    assert [int(i) for i in STEP.findall(section)] == [s.index for s in steps] and len(steps) > 3
    assert f"{len(steps)} of {len(index['passes'])} passes changed {func}" in section
    # old and new side by side: a removed line and its replacement in one row
    assert re.search(r'<tr><td class="ln">\d+</td><td class="old d-del">.*?</td><td class="ln">\d+</td>'
                     r'<td class="new d-add">', section)
    assert STEP.findall(_dom(run / "index.html")) == []  # no function chosen: no history shown


class _Cells(html.parser.HTMLParser):
    """A table's elements (tag, attributes) and texts as a browser would build them: the highlighting spans and
    the ``<tbody>`` the parser adds left out, adjacent texts joined."""

    def __init__(self, markup: str):
        super().__init__()
        self.items: list = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag not in ("span", "tbody"):
            self.items.append((tag, attrs))

    def handle_data(self, data):
        if self.items and isinstance(self.items[-1], str):
            self.items[-1] += data
        else:
            self.items.append(data)


TABLE = re.compile(r'<table class="sbs">.*?</table>', re.S)


def _history_section(dom: str) -> str:
    return dom[dom.index('<section id="history">'):dom.index("<h2>Files</h2>")]


def test_the_history_tables_the_script_makes_are_the_renderers_markup(run):
    """The page's script makes the cells from the rows; the DOM is side_by_side_html's for the same diff."""
    from mtp_tvm.instrument.kernel_history import kernel_history
    from mtp_tvm.instrument.report import history_step_lines
    from mtp_tvm.instrument.side_by_side import side_by_side_html

    index = json.loads((run / "index.json").read_text())
    func = _most_changed(run, index)
    steps = kernel_history(run, index, func).steps
    shown = TABLE.findall(_history_section(_dom(run / "index.html", f"#func={func}")))
    assert len(shown) == len(steps) > 3
    for table, step in zip(shown, steps, strict=True):
        assert _Cells(table).items == _Cells(side_by_side_html(history_step_lines("\n".join(step.diff)))).items


def _history_data(run) -> str:
    page = (run / "index.html").read_text()
    return re.search(r'<script type="application/json" id="history-data">(.*?)</script>', page, re.S).group(1)


def test_the_embedded_history_is_smaller_than_the_kernel_text_it_shows(run):
    """Rows of indices into texts stored once: on the tiny tail 0.55x the text of the steps' diffs (386 steps,
    2.7 MB of text). Each step's diff as text would be ~1.05x, the tables as escaped markup in JSON ~2.4x."""
    from mtp_tvm.instrument.kernel_history import histories
    from mtp_tvm.instrument.report import history_step_lines

    index = json.loads((run / "index.json").read_text())
    steps = [s for f in histories(run, index).values() for s in f]
    text = sum(len(line) for s in steps for line in history_step_lines(s["diff"]))
    assert len(steps) > 100 and len(_history_data(run)) <= 0.75 * text


def test_re_rendering_an_older_page_rebuilds_its_history_from_the_pass_files(run, tmp_path):
    """A page written before the history was row data (its steps as rendered tables) would show no table if its
    history were kept: a re-render (the golden verdict added) makes it anew from the pass files."""
    from mtp_tvm.instrument.report import history_script
    from mtp_tvm.instrument.run_folder import update_index

    old = tmp_path / "run"
    shutil.copytree(run, old)
    page = (old / "index.html").read_text()
    func = _most_changed(run, json.loads((run / "index.json").read_text()))
    older = json.dumps({func: [{"index": 5, "phase": "fuse", "name": "FuseOps", "depth": 0,
                                                       "event": "changed", "added": 1, "removed": 1,
                                                       "table": "<table></table>"}]})
    (old / "index.html").write_text(page.replace(_history_data(old), older.replace("<", "\\u003c")))
    index = update_index(old, check={"passed": True, "seed": 0})
    assert _history_data(old) == history_script(run, index)[len('<script type="application/json" '
                                                              'id="history-data">'):-len("</script>")]
    dom = _dom(old / "index.html", f"#func={func}")
    section = _history_section(dom)
    assert len(TABLE.findall(section)) == len(STEP.findall(section)) > 3 and "PASSED" in dom


def test_pass_table_marks_nested_and_skipped_passes(run, tmp_path):
    index = json.loads((run / "index.json").read_text())
    table = pass_table(index)  # the passes run inside FuseTIR folded into its row, counted
    assert re.search(r"\n\d{3}  fuse +FuseTIR \[\+\d+ nested, \d+ changed\] +changed", table)
    assert "ExpandTupleArguments" not in table
    table = pass_table(index, nested=True)
    assert re.search(r"\n\d{3}  fuse +FuseTIR +changed", table)
    assert re.search(r"\n\d{3}  fuse +  ExpandTupleArguments ", table)  # run inside FuseTIR: indented
    m = mtp_tvm.compile(case="logits", preset="tiny", frontend="relax", dump_passes=tmp_path, bisect_limit=0)
    table = pass_table(json.loads((m.dump_dir / "index.json").read_text()))
    assert re.search(r"FoldConstant +skipped \(bisect-limit\)", table)
    assert re.search(r"FuseTIR +skipped \(bisect-limit\)", table) and "ExpandTupleArguments" not in table


KERNEL_ROW = re.compile(r'<tr class="kernel"><td>([^<]+)</td><td class="num">([\d.]+)</td>'
                        r'<td class="num share">([\d.]+)%')


def test_a_profiled_run_shows_every_kernel_with_its_time_and_share(tmp_path):
    from mtp_tvm.tools.measure.profile import ProfileOptions, profile, write_to_run_folder

    m = mtp_tvm.compile(case="tail", preset="tiny", dump_passes=tmp_path)
    p = profile(m, options=ProfileOptions(rounds=1, sample_ms=1.0))
    write_to_run_folder(p, m.dump_dir)
    dom = _dom(m.dump_dir / "index.html")
    section = dom[dom.index('<section id="profile"'):]
    assert section.startswith('<section id="profile">')  # shown
    rows = KERNEL_ROW.findall(section)
    assert [name for name, _ms, _share in rows] == [k.name for k in p.kernels]
    assert [float(ms) for _name, ms, _share in rows] == [round(k.ms, 4) for k in p.kernels]
    assert [float(share) for _n, _ms, share in rows] == [round(100 * k.share, 1) for k in p.kernels]
    assert re.search(r'<tr class="other"><td>VM/other</td>', section)
    assert f"{100 * p.coverage:.1f}% of the measured main" in section
    assert 'href="profile.json"' in dom


def test_an_unprofiled_run_hides_the_kernel_table(run):
    dom = _dom(run / "index.html")
    assert '<section id="profile" hidden=""' in dom and '<section id="localize" hidden=""' in dom


CALL_ROW = re.compile(r'<tr class="(call-first|call-diff|)"><td>(.*?)</td>')


def test_a_localized_run_highlights_the_first_differing_call_linked_to_its_history(tmp_path):
    from pathlib import Path

    from mtp_tvm.passes.plugins import load_pass_plugin
    from mtp_tvm.tools.check.localize import localize

    plugin = INT32_ACCUMULATOR_PLUGIN
    r = localize(case="tail", preset="tiny", extra_passes=load_pass_plugin(plugin), against="schedule=none",
                 dump_passes=tmp_path, log=lambda *_: None)
    run = Path(r.dump_dir)
    rows = json.loads((run / "index.json").read_text())["localize"]["rows"]
    assert [row["result"] for row in rows].count("FIRST") == 1
    dom = _dom(run / "index.html")
    section = dom[dom.index('<section id="localize"'):dom.index("</section>", dom.index('<section id="localize"'))]
    assert section.startswith('<section id="localize">')  # shown
    shown = CALL_ROW.findall(section)
    assert len(shown) == len(rows)
    assert [cls for cls, _cell in shown].count("call-first") == 1
    first = next(cell for cls, cell in shown if cls == "call-first")
    assert first == '<a href="#func=lm_head_logits_prepacked">#9 lm_head_logits_prepacked</a>'
    assert all(cls == "" for cls, _cell in shown[:[c for c, _ in shown].index("call-first")])  # agreed before it
    assert 'href="kernel_repro/repro.py"' in section and "FIRST DIFFERING CALL: #9" in section
    history = _dom(run / "index.html", "#func=lm_head_logits_prepacked")  # where the link leads
    assert 'class="step"' in history
