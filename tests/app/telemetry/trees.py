"""Reading a trace the receiver got: children, one span by name, the tree printed as text."""

from __future__ import annotations

from collections.abc import Sequence

from tests.app.telemetry.otlp_receiver import Span

__all__ = ["children", "one", "render"]


def one(spans: Sequence[Span], name: str) -> Span:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {sorted(s.name for s in spans)}"
    return found[0]


def children(spans: Sequence[Span], parent: Span) -> list[Span]:
    return sorted(
        (s for s in spans if s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id),
        key=lambda span: span.start_ns,
    )


def render(spans: Sequence[Span]) -> str:
    """The spans as an indented tree (roots: spans whose parent was not exported)."""
    ids = {span.span_id for span in spans}
    lines: list[str] = []

    def walk(span: Span, depth: int) -> None:
        links = "".join(f" link->{trace[:8]}/{span_id}" for trace, span_id, _ in span.links)
        lines.append(
            f"{'  ' * depth}{span.name} [{span.kind}] trace={span.trace_id[:8]} "
            f"span={span.span_id} status={span.status}{links}"
        )
        for child in children(spans, span):
            walk(child, depth + 1)

    roots = sorted((s for s in spans if s.parent_span_id not in ids), key=lambda s: s.start_ns)
    for root in roots:
        walk(root, 0)
    return "\n".join(lines)
