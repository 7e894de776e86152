// Types of sse.js: Server-Sent Events frames from a fetch body.
export interface SSEFrame { event: string; data: string; id: string | undefined }
export declare function readSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEFrame>;
