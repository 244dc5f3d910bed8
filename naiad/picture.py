"""A picture of the logical graph: Graphviz DOT text, and rendering it with Graphviz's ``dot``.

Stages are nodes named as in errors and traces; system stages of a loop have their own shapes
(ingress a house, egress an inverted house, feedback a circle); each loop context is a cluster
drawn inside the scope that holds it; each connector is an edge labelled with its partitioning
(``exchange(key)`` or nothing for a pipeline).

>>> import naiad
>>> comp = naiad.Computation()
>>> inp = comp.new_input(name="lines")
>>> _ = inp.stream.subscribe(print)
>>> dot = comp.graph_dot()
>>> dot.splitlines()[0]
'digraph naiad {'
>>> '"s0" [label="lines"' in dot
True
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Any, Dict, List

from naiad.graph import EGRESS, FEEDBACK, INGRESS, INPUT, Scope, StageDef

if TYPE_CHECKING:  # pragma: no cover
    from naiad.graph import LogicalGraph

__all__ = ["graph_dot", "graph_json", "render", "GRAPHVIZ_HELP"]

GRAPHVIZ_HELP = ("Graphviz's `dot` is not installed: install it (Debian/Ubuntu: "
                 "`sudo apt-get install graphviz`; macOS: `brew install graphviz`), or write "
                 "DOT text with `-o graph.dot` and render it elsewhere")

_SHAPES = {INPUT: "invtrapezium", INGRESS: "house", EGRESS: "invhouse", FEEDBACK: "ellipse"}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _home(st: StageDef) -> Scope:
    """The scope a stage is drawn in: a loop's ingress belongs inside the loop it enters."""
    if st.kind == INGRESS and st.output_scopes:
        return st.output_scopes[0]
    return st.scope


def _partitioning(exchange) -> str:
    key = getattr(exchange, "key", None)
    if key is None:
        return ""
    return f"exchange({getattr(key, '__name__', type(key).__name__)})"


def graph_dot(graph: "LogicalGraph") -> str:
    """The logical graph as Graphviz DOT text (deterministic: same graph, same text)."""
    children: Dict[Scope, List[Scope]] = {}
    members: Dict[Scope, List[StageDef]] = {}
    for st in graph.stages:
        scope = _home(st)
        members.setdefault(scope, []).append(st)
        while scope.parent is not None:
            kids = children.setdefault(scope.parent, [])
            if scope not in kids:
                kids.append(scope)
            scope = scope.parent
    lines = ["digraph naiad {", "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", '
             'fontname="Helvetica"];', '  edge [fontname="Helvetica", fontsize=10];']
    counter = [0]
    unused = graph.unread()        # drawn as left out before activate() prunes them too

    def emit(scope: Scope, indent: str) -> None:
        for st in members.get(scope, []):
            attrs = [f"label={_quote(st.name)}"]
            if st.id in unused:
                attrs.append('style="rounded,dashed"')
                attrs.append('fontcolor="#888888"')
            elif st.kind in _SHAPES:
                attrs.append(f"shape={_SHAPES[st.kind]}")
                attrs.append('fillcolor="#fdf1dc"')
            lines.append(f"{indent}\"s{st.id}\" [{', '.join(attrs)}];")
        for sub in children.get(scope, []):
            counter[0] += 1
            lines.append(f"{indent}subgraph cluster_{counter[0]} {{")
            lines.append(f"{indent}  label={_quote('loop ' + sub.name)}; style=dashed;")
            emit(sub, indent + "  ")
            lines.append(f"{indent}}}")

    emit(graph.top, "  ")
    for c in graph.connectors:
        label = _partitioning(c.exchange)
        attrs = [f"label={_quote(label)}"] if label else []
        if graph.stages[c.src].kind == FEEDBACK:
            attrs.append("constraint=false")
        gone = c.unused or c.dst in unused
        if graph.stages[c.dst].kind == FEEDBACK or gone:
            attrs.append("style=dashed")
        if gone:
            attrs.append('color="#aaaaaa"')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f'  "s{c.src}" -> "s{c.dst}"{suffix};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_json(graph: "LogicalGraph") -> Dict[str, Any]:
    """The logical graph as plain data (for traces and the monitor page): stages with their
    kind and loop path, connectors with their partitioning."""
    return {
        "stages": [{"id": st.id, "name": st.name, "kind": st.kind, "scope": _home(st).path(),
                    "depth": _home(st).depth, "unused": st.unused} for st in graph.stages],
        "connectors": [{"id": c.id, "src": c.src, "dst": c.dst,
                        "partitioning": _partitioning(c.exchange) or "pipeline"}
                       for c in graph.connectors],
    }


def render(dot: str, fmt: str) -> bytes:
    """Render DOT text with Graphviz (``fmt``: svg, png, pdf, ...); RuntimeError when absent."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError(GRAPHVIZ_HELP)
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True,
                          timeout=60, check=False)
    if proc.returncode != 0:
        msg = f"Graphviz's dot failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
        raise RuntimeError(msg)
    return proc.stdout
