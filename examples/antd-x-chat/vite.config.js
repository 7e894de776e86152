// Built into dist/ and served by the gateway at /example/ (same origin: no CORS). `npm run dev`
// serves it from Vite instead, forwarding /v1 to the gateway of `make run`.
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

const gateway = process.env.AGENT_GATEWAY_URL ?? "http://127.0.0.1:8000";

export default defineConfig({
  base: "/example/",
  plugins: [react()],
  // @agent-gateway/client is linked from ../../clients/js: one copy of React and x-sdk.
  resolve: { dedupe: ["react", "react-dom", "@ant-design/x-sdk"] },
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 4096 },
  server: { proxy: { "/v1": { target: gateway, changeOrigin: false } } },
});
