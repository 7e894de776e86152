"""examples/antd-x-chat's JSX type-checks (tsc --checkJs, strict) against its libraries' types:
React's, Ant Design X's and @agent-gateway/client's declarations."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clients.js.support import CLIENT, ensure_node_modules, type_check
from tests.examples.support import EXAMPLE

# A prop the component does not take and an untyped parameter: what the check must refuse.
WRONG = """\
import AssistantContent from "%s";
export function Wrong(props) {
  return <AssistantContent message={{ pending: true }} provider={null} />;
}
"""


def test_the_example_type_checks() -> None:
    ensure_node_modules(CLIENT)  # the linked client's declarations import x-sdk's types
    proc = type_check(EXAMPLE, "jsconfig.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_check_refuses_a_wrong_prop_and_an_untyped_parameter(tmp_path: Path) -> None:
    (tmp_path / "Wrong.jsx").write_text(WRONG % (EXAMPLE / "src" / "AssistantContent.jsx"))
    config = {
        "extends": str(EXAMPLE / "jsconfig.json"),
        "include": [str(EXAMPLE / "src" / "*.jsx"), str(tmp_path / "Wrong.jsx")],
    }
    (tmp_path / "jsconfig.json").write_text(json.dumps(config))
    ensure_node_modules(CLIENT)
    proc = type_check(EXAMPLE, str(tmp_path / "jsconfig.json"))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Wrong.jsx(2," in output and "TS7006" in output, output  # implicit any
    assert "Wrong.jsx(3," in output and "TS2322" in output, output  # provider={null}
    assert "src/" not in output, output  # the example itself stays clean
