// CopilotKit Runtime v2 relaying an AG-UI HttpAgent (the peer of bench/peer_bench.py).
//
// Env: PORT (loopback port to listen on), BENCH_AGUI_URL (the mock AG-UI upstream endpoint).
// Telemetry is off (COPILOTKIT_TELEMETRY_DISABLED / DO_NOT_TRACK are forced here too) and the
// server listens on 127.0.0.1 only. Route: POST /api/copilotkit/agent/bench/run (RunAgentInput
// in, AG-UI SSE out); GET /api/copilotkit/info answers when ready.
process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
process.env.DO_NOT_TRACK = "1";

import { createServer } from "node:http";
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";

const port = Number(process.env.PORT ?? "0");
const upstream = process.env.BENCH_AGUI_URL;
if (!upstream) throw new Error("BENCH_AGUI_URL is required");

const runtime = new CopilotRuntime({
  agents: { bench: new HttpAgent({ url: upstream }) },
});
const listener = createCopilotNodeListener({
  runtime,
  basePath: "/api/copilotkit",
  activateChannels: false,
});
const server = createServer(listener);
server.listen(port, "127.0.0.1", () => {
  console.log(`copilotkit peer listening on 127.0.0.1:${server.address().port}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
