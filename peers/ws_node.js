// WebSocket echo peer for the WebSocket benchmark (issue 20): Node's `ws` package, the
// everyday Node WebSocket server, echoing every message as it came (binary stays binary).
// No per-message deflate (berth offers none either).
//
// Usage: node peers/ws_node.js PORT   (needs `npm install ws`; bench/ws.py installs it under
// target/ and sets NODE_PATH)
const { WebSocketServer } = require("ws");

const port = Number(process.argv[2]);
const wss = new WebSocketServer({ host: "127.0.0.1", port, perMessageDeflate: false });
wss.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
});
wss.on("listening", () => console.log(`ws-node listening on 127.0.0.1:${port}`));
