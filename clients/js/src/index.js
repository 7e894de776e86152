// @agent-gateway/client: the protocol reducer and the gateway client, in one import.
export * from "./agent-reducer.js";
export { GatewayClient, GatewayError, createGatewayClient } from "./gateway-client.js";
