"""The page's state in its URL: read when the page opens, written back once changes settle.

Panel's `Location.sync` writes the URL on every change. During a slider drag that is a
browser history entry and a message handled ahead of the new report at every step (~7 ms
of the browser's time per step), so the URL here follows the state after a short pause.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import param

from dashboard.state import Chosen, NetworkName
from engine import zoo

SETTLE_MS = 300  # the URL follows the state this long after its last change


def restore(state: param.Parameterized, location, names) -> list[str]:
    """Apply the URL's values of `names` to `state`, in the order of `names` (a preset before the fields it
    sets); a malformed value keeps its default, and is named in the returned list (what, and what is allowed)."""
    query = location.query_params
    typed = {k: v[-1] for k, v in parse_qs((location.search or "").lstrip("?")).items()}  # as in the address bar
    problems = []
    for name in names:
        if name not in query:
            continue
        value = query[name]
        try:
            value = state.param[name].deserialize(value)
        except Exception:  # query_params already parsed it (a number, a JSON list)
            pass
        try:
            state.param.update(**{name: value})
        except Exception:  # e.g. buffer_kb=7, not a slider step: the page opens with the default
            problems.append(rejected(state, name, f"{name}={typed.get(name, query[name])}"))
    return problems


def rejected(state: param.Parameterized, name: str, given: str) -> str:
    """Why a value given for `name` (as `given` names it) was refused: what is allowed, and the value kept."""
    return f"{given} is not allowed ({allowed(state.param[name])}); using {getattr(state, name)!r}"


def allowed(parameter: param.Parameter) -> str:
    """What a parameter accepts, in words: its bounds or its choices."""
    if isinstance(parameter, param.ListSelector):
        words = "at least one of: " if isinstance(parameter, Chosen) else "a list of: "
        return words + ", ".join(map(str, parameter.objects))
    if isinstance(parameter, param.Selector):
        choices = list(parameter.objects)
        text = "one of " + ", ".join(map(str, choices[:12]))
        text += f", ... ({len(choices)} in all)" if len(choices) > 12 else ""
        if isinstance(parameter, NetworkName):
            text += ", or a language model with its token count: " + ", ".join(
                f"{base}_{suffix}<N>" for base, (suffix, _) in zoo.LENGTHS.items())
        return text
    if isinstance(parameter, param.Number) and parameter.bounds:
        low, high = parameter.bounds
        return f"{'an integer' if isinstance(parameter, param.Integer) else 'a number'} from {low} to {high}"
    return f"a {type(parameter).__name__.lower()}"


def query_of(state: param.Parameterized, names) -> dict[str, str]:
    """The URL query values of `names`, serialised as Panel's own URL sync does."""
    query = {}
    for name in names:
        value = getattr(state, name)
        if value is None:
            continue
        value = state.param[name].serialize(value)
        query[name] = value if isinstance(value, str) else json.dumps(value)
    return query


def follow(state: param.Parameterized, location, names, doc) -> None:
    """Write `state` into the URL now, and again SETTLE_MS after each burst of changes."""
    waiting = []

    def write():
        waiting.clear()
        location.update_query(**query_of(state, names))

    def changed(*_):
        if not waiting:
            waiting.append(doc.add_timeout_callback(write, SETTLE_MS))

    state.param.watch(changed, list(names))
    write()
