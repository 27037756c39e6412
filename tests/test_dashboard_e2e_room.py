"""End to end, issue 29's words and units as a person reads them in the page (the unit tests check the functions that
write them: tests/test_dashboard.py). The server and browser fixtures are tests/conftest.py's (no page may leave
loopback)."""

import re
from pathlib import Path

import pytest
from conftest import CHROMIUM

pytestmark = [pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason="Debian's chromium is not installed (make test installs it when run as root)"),
              pytest.mark.xdist_group("browser-inputs")]  # one server for the module, on one worker

# The text of the DAG figure's title (drawn in its canvas, not in the page's text).
DAG_TITLE = """() => {
  for (const doc of Bokeh.documents)
    for (const fig of doc.all_models)
      if (fig.type === "Figure" && fig.renderers.some(r => r.data_source?.name === "dag-ops")) return fig.title.text;
  return null;
}"""


def test_the_llama_prefills_headline_names_the_tie_as_the_dag_does_with_separated_gmacs(server, browser):
    """Issue 29: '15393.69 GMACs' without separators; the headline said 'best plan (dnnvm)' on a tie while the DAG
    said 'fused by optimus'; the legend said '1 ops' and its KB were 1,000 bytes."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(server + "?network=llama3_8b_prefill")
    summary = page.get_by_text(re.compile(r"best plan \(")).first
    summary.wait_for()  # the one-pass methods' report (optimus not in it yet), then the search's
    page.get_by_text(re.compile("still searching")).wait_for(state="detached")
    text = summary.inner_text()
    assert "15,393.69 GMACs" in text and "best plan (optimus, tied with efficient_s)" in text, text
    page.wait_for_function("() => (" + DAG_TITLE + ")()?.includes('fused by optimus')")
    assert page.evaluate(DAG_TITLE).startswith("llama3_8b_prefill: 580 groups fused by optimus")
    # G0 is the embedding lookup alone: its DRAM bytes in KB of 1,024 bytes, one op in the singular
    page.get_by_text("1 op: model.embed_tokens", exact=True).first.wait_for()
    assert page.get_by_text("32,772.0 KB", exact=True).count() >= 1
    assert not page.get_by_text(re.compile(r"\b1 ops\b")).count()
    page.close()
