// WebSocket echo peer for the WebSocket benchmark (issue 20): Node's `ws` package, the
// everyday Node WebSocket server, echoing every message as it came (binary stays binary).
// No per-message deflate, unless `deflate` follows the port (bench/ws_deflate.py, issue 34):
// then permessage-deflate with berth's defaults (level 1, messages of 256 bytes and more
// compressed, server_no_context_takeover, window 15).
//
// Usage: node peers/ws_node.js PORT [deflate]   (needs `npm install ws`; bench/ws.py installs
// it under target/ and sets NODE_PATH)
const { WebSocketServer } = require("ws");

const port = Number(process.argv[2]);
const perMessageDeflate =
  process.argv[3] === "deflate"
    ? { threshold: 256, serverNoContextTakeover: true, zlibDeflateOptions: { level: 1, memLevel: 8 } }
    : false;
const wss = new WebSocketServer({ host: "127.0.0.1", port, perMessageDeflate, maxPayload: 64 << 20 });
wss.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
});
wss.on("listening", () => console.log(`ws-node listening on 127.0.0.1:${port}`));
