// Preloaded into Playwright MCP (`node --require`). The HTTP server it opens on $AWORLD_GYM_LISTEN_PORT listens on
// the Unix socket $AWORLD_GYM_LISTEN_SOCKET instead (mode 0600, in a 0700 folder), so only this user's processes
// can drive the browser; nothing listens on a TCP port at all.
const net = require('net');
const fs = require('fs');

const socketPath = process.env.AWORLD_GYM_LISTEN_SOCKET;
const port = Number(process.env.AWORLD_GYM_LISTEN_PORT);
if (socketPath && port) {
  const listen = net.Server.prototype.listen;
  net.Server.prototype.listen = function (...args) {
    const asked = args[0] !== null && typeof args[0] === 'object' ? args[0].port : args[0];
    if (Number(asked) !== port) return listen.apply(this, args);
    fs.rmSync(socketPath, { force: true });
    // Playwright builds its URL and Host check from address(): report the port it asked for.
    this.address = () => ({ address: '127.0.0.1', family: 'IPv4', port });
    const umask = process.umask(0o177);
    try {
      return listen.call(this, socketPath, ...args.filter((a) => typeof a === 'function'));
    } finally {
      process.umask(umask);
    }
  };
}

// The server ends with the driver that started it ($AWORLD_GYM_PARENT_PID): a driver killed with SIGKILL runs no
// exit handler, and its browser server would live on (Playwright kills the browser it launched as Node exits).
const parent = Number(process.env.AWORLD_GYM_PARENT_PID);
if (parent) {
  setInterval(() => {
    if (process.ppid !== parent) process.exit(0);
  }, 1000).unref();
}
