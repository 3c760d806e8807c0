"""Pages never run or render their data: every placeholder and markup string in a run's data stays text.
The pages are parsed back: no element or attribute comes from the data, and the embedded JSON is the
data, exactly."""

import html.parser
import json
import shutil

import pytest

import mtp_tvm
from mtp_tvm.instrument.report import write_html
from mtp_tvm.instrument.run_folder import update_index
from mtp_tvm.support.html_page import Markup, escape, json_script, render
from mtp_tvm.tools.dumps.compare import compare_runs
from mtp_tvm.tools.dumps.compare_page import comparison_page

PLACEHOLDERS = ["{{title}}", "{{data}}", "{{history}}", "{{head}}", "{{settings}}", "{{counts}}", "{{verdict}}",
                "{{rows}}", "{{diff}}", "{{code}}", "{{kernels}}", "{{ title }}", "{{", "}}"]
MARKUP = ["<img src=x onerror=alert(4)>", "</script><script>alert(1)</script>", "<!--", "-->", "<![CDATA[",
          "\"'><svg onload=alert(2)>", "&lt;&amp;", "\u2028\u2029", "javascript:alert(3)", "</title>", "<\\/script>"]
HOSTILE = "".join(PLACEHOLDERS + MARKUP)


class _Page(html.parser.HTMLParser):
    """Every start tag with its attributes, and the text of each JSON script element by id."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.json, self._script = [], {}, None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        attrs = dict(attrs)
        self._script = attrs.get("id") if tag == "script" and attrs.get("type") == "application/json" else None

    def handle_data(self, data):
        if self._script is not None:
            self.json[self._script] = self.json.get(self._script, "") + data

    def handle_endtag(self, tag):
        self._script = None


def _assert_inert(page: str) -> _Page:
    parsed = _Page(page)
    assert not [t for t, _ in parsed.tags if t in ("img", "svg", "iframe", "object")]
    assert not [(t, a) for t, attrs in parsed.tags for a in attrs if a.startswith("on")]
    assert not [t for t in parsed.json.values() if set("<>&\u2028\u2029") & set(t)]
    return parsed


def test_render_fills_slots_once_and_never_inside_values():
    page = render("<title>{{a}}</title><p>{{b}}</p>", a=escape("{{b}}<x>"), b=escape("{{a}}"))
    assert page == "<title>{{b}}&lt;x&gt;</title><p>{{a}}</p>"


def test_render_refuses_plain_strings_and_missing_or_extra_slots():
    with pytest.raises(TypeError, match="not Markup"):
        render("{{a}}", a="<b>")
    with pytest.raises(KeyError):
        render("{{a}}{{b}}", a=Markup(""))
    with pytest.raises(KeyError):
        render("{{a}}", a=Markup(""), b=Markup(""))


@pytest.mark.parametrize("text", PLACEHOLDERS + MARKUP + [HOSTILE])
def test_json_script_round_trips_any_string_and_cannot_end_its_element(text):
    data = {"k" + text: [text, {"nested": text}]}
    element = json_script("x", data)
    inner = element[len('<script type="application/json" id="x">'):-len("</script>")]
    assert not set("<>&\u2028\u2029") & set(inner)
    parsed = _assert_inert(element)
    assert json.loads(parsed.json["x"]) == data


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A real run dumped with the issue's --dump-filter, then its index given hostile strings everywhere a
    user or a tool puts text."""
    root = tmp_path_factory.mktemp("dumps")
    run = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=root,
                          dump_filter="{{history}}<img src=x onerror=alert(4)>|Fuse").dump_dir
    return run


def test_the_dump_filter_of_the_issue_stays_text_in_index_html(hostile_run):
    page = (hostile_run / "index.html").read_text()
    parsed = _assert_inert(page)
    index = json.loads(parsed.json["index-data"])
    assert index["dump"]["filter"] == "{{history}}<img src=x onerror=alert(4)>|Fuse"
    assert index == json.loads((hostile_run / "index.json").read_text())
    assert set(parsed.json) == {"index-data", "diff-data", "profile-data", "history-data"}


def _hostile_copy(hostile_run, tmp_path) -> tuple:
    """A copy of the run and its index with every pass's name and phase ending in ``HOSTILE`` (not yet written)."""
    run = tmp_path / "run"
    shutil.copytree(hostile_run, run)
    index = json.loads((run / "index.json").read_text())
    for p in index["passes"]:
        p["name"] += HOSTILE
        p["phase"] += HOSTILE
    return run, index


def test_every_placeholder_and_markup_string_in_the_index_stays_text(hostile_run, tmp_path):
    run, index = _hostile_copy(hostile_run, tmp_path)
    update_index(run, case=HOSTILE, target={**index["target"], "kind": HOSTILE}, preset=HOSTILE, error=HOSTILE,
                 passes=index["passes"],
                 check={"passed": False, "seed": 0, "failed_outputs": [HOSTILE], "repro": HOSTILE})
    page = (run / "index.html").read_text()
    parsed = _assert_inert(page)
    assert json.loads(parsed.json["index-data"])["error"] == HOSTILE
    assert json.loads(parsed.json["history-data"]) == json.loads(_Page(write_html(run, index).read_text()
                                                                       ).json["history-data"])
    assert f"<title>mtp_tvm passes: {escape(f'{HOSTILE} on {HOSTILE}')}</title>" in page
    assert page.count("<script>") == 1  # the page's own script, nothing from the data


def test_the_compare_page_keeps_hostile_run_names_and_passes_as_text(hostile_run, tmp_path):
    name = "{{rows}}{{title}}<img src=x onerror=alert(4)>\"'><svg onload=alert(2)><!--"
    a, b = tmp_path / name, tmp_path / ("b" + name)
    shutil.copytree(hostile_run, a)
    shutil.copytree(hostile_run, b)
    index = json.loads((b / "index.json").read_text())
    index["passes"][1]["name"] += HOSTILE
    (b / "index.json").write_text(json.dumps(index))
    page = comparison_page(compare_runs(a, b))
    parsed = _assert_inert(page)
    assert not parsed.json and page.count("<script") == 0


@pytest.mark.slow  # a headless browser in a subprocess
def test_a_browser_renders_the_hostile_page_with_no_element_or_link_from_its_data(hostile_run, tmp_path):
    """The page's own script puts the data into the DOM: escaped there too, and no ``javascript:`` link."""
    from tests.test_dump_report import _dom

    run, index = _hostile_copy(hostile_run, tmp_path)
    for p in index["passes"]:
        p["file"] = "javascript:alert(6)" if p["file"] else p["file"]
    update_index(run, passes=index["passes"], error=HOSTILE, preset=HOSTILE)
    dom = _dom(run / "index.html")
    assert "<tr class=\"pass" in dom  # the script ran and drew the table
    assert "<img" not in dom and "<svg" not in dom and 'href="javascript:' not in dom
    assert "onerror=alert(4)&gt;" in dom  # the data, as text
