"""A loopback OTLP/HTTP receiver for the telemetry figures: prints its port, then every 30 s
how many spans it decoded (``tests/app/telemetry/otlp_receiver.py``, protobuf decoded with
``opentelemetry-proto``, as the tests do).

Usage: ``.venv/bin/python bench/otlp_sink.py &`` then
``export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT`` for the benches (BENCHMARKS.md,
"OpenTelemetry (issue 53)").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.app.telemetry.otlp_receiver import otlp_receiver


def main() -> None:
    with otlp_receiver() as receiver:
        print(receiver.port, flush=True)
        while True:
            time.sleep(30)
            with receiver.changed:
                count = len(receiver.spans)
                receiver.spans.clear()  # bounded: only the count is kept
            print("spans", count, flush=True)


if __name__ == "__main__":
    main()
