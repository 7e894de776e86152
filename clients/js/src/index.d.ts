export * from "./agent-reducer.js";
export { GatewayClient, GatewayError, createGatewayClient } from "./gateway-client.js";
export type { GatewayClientOptions, ConnectionState, ClientSnapshot } from "./gateway-client.js";
