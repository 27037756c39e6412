"""The floor of a slider move: the dashboard's template and buffer slider, and one line of text that follows it.

`bench_dashboard` serves it beside the dashboard (`panel serve dashboard benchmarks/floor_app.py`):
whatever a dashboard move costs beyond this page's is the views' own work.
"""

import panel as pn

from dashboard.panel_hooks import Fast, LiveDiscreteSlider, send_frames_at_once
from dashboard.state import BUFFER_STEPS_KB


def floor_page() -> pn.template.FastListTemplate:
    """The template and slider of the dashboard, and a Markdown line naming the slider's value while held and on release."""
    slider = LiveDiscreteSlider(label="On-chip buffer (KB, log scale)", options=BUFFER_STEPS_KB, value=BUFFER_STEPS_KB[0])
    text = pn.pane.Markdown("", sizing_mode="stretch_width")

    def say(*_):
        text.object = f"best plan (none): held at {slider.value} KB, released at {slider.value_throttled} KB"

    slider.param.watch(say, ["value", "value_throttled"])
    say()
    page = pn.template.FastListTemplate(title="slider floor", sidebar_width=330, busy_indicator=None, design=Fast,
                                        font="system-ui, sans-serif")
    page.sidebar.append(slider)
    page.main.append(text)
    doc = pn.state.curdoc
    pn.state.onload(lambda: send_frames_at_once(doc))
    return page


floor_page().servable()
