// sse.js — Server-Sent Events frames from a fetch body (the WHATWG event-stream grammar).
//
// Lines end in CRLF, LF or CR; `:` lines are comments (heartbeats); a frame ends at a blank
// line. Each frame is `{ event, data, id }` (`event` is "message" when the frame has no
// `event:` line, `id` is undefined when it has none).

/**
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<import("./sse.js").SSEFrame>}
 */
export async function* readSSE(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  /** @type {string[]} */
  let data = [];
  let event = "";
  /** @type {string | undefined} */
  let id;
  let sawCR = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      let text = decoder.decode(value, { stream: true });
      if (sawCR && text.startsWith("\n")) text = text.slice(1); // CRLF split across chunks
      sawCR = text.endsWith("\r");
      buffer += text;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop() ?? ""; // split gives at least one piece
      for (const line of lines) {
        if (line === "") {
          if (data.length) yield { event: event || "message", data: data.join("\n"), id };
          data = [];
          event = "";
          id = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value_ = colon < 0 ? "" : line.slice(colon + 1);
        if (value_.startsWith(" ")) value_ = value_.slice(1);
        if (field === "data") data.push(value_);
        else if (field === "event") event = value_;
        else if (field === "id" && !value_.includes("\0")) id = value_;
      }
    }
  } finally {
    reader.cancel().catch(() => {}); // a consumer that stops early frees the connection
  }
}
