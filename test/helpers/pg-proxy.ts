import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll } from 'vitest';

/** One PostgreSQL protocol message as the proxy saw it. */
export interface PgMessage {
  /** 'client' (frontend → server) or 'server'. */
  from: 'client' | 'server';
  /** The message type byte ('Q', 'P', 'B', 'E', 'S', 'C', 'Z', …); '' for the startup packet. */
  type: string;
  /** The message body (without type and length). */
  body: Buffer;
  /** The connection's number (1, 2, … in the order they were accepted). */
  conn: number;
}

/**
 * A TCP proxy on loopback between a client and a PostgreSQL server that understands just enough
 * of the wire protocol to cut a connection at an exact message: `decide(msg)` is asked before each
 * message is forwarded; 'forward-then-drop' forwards it and then cuts both sides (the server gets
 * the message and EOF; the client gets nothing more), 'drop' cuts before forwarding.
 */
export class PgProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private conns = 0;
  port = 0;
  decide: (msg: PgMessage) => 'forward' | 'forward-then-drop' | 'drop' = () => 'forward';
  /** How many connections were cut. */
  cuts = 0;
  /** While true, new connections are closed at once (the server looks unreachable). */
  refuse = false;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<string> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((res) => this.server!.listen(0, '127.0.0.1', res));
    this.port = (this.server.address() as { port: number }).port;
    return `127.0.0.1:${this.port}`;
  }

  private accept(client: Socket): void {
    if (this.refuse) {
      client.destroy();
      return;
    }
    const conn = ++this.conns;
    const upstream = connect(this.targetPort, this.targetHost);
    // no Nagle: each message goes out at once (else delayed ACKs stall every round trip ~40 ms)
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    this.sockets.add(client);
    this.sockets.add(upstream);
    let cut = false;
    const cutBoth = () => {
      if (cut) return;
      cut = true;
      this.cuts++;
      upstream.end(); // what was written reaches the server, then EOF
      client.destroy();
    };
    const pipe = (from: 'client' | 'server', src: Socket, dst: Socket) => {
      let buf = Buffer.alloc(0);
      let startup = from === 'client';
      src.on('data', (chunk) => {
        if (cut) return;
        buf = Buffer.concat([buf, chunk]);
        for (;;) {
          const headLen = startup ? 0 : 1;
          if (buf.length < headLen + 4) return;
          const len = buf.readUInt32BE(headLen);
          const total = headLen + len;
          if (buf.length < total) return;
          const raw = buf.subarray(0, total);
          buf = buf.subarray(total);
          const msg: PgMessage = { from, type: startup ? '' : String.fromCharCode(raw[0]!), body: raw.subarray(headLen + 4), conn };
          // an SSLRequest is answered with one byte 'N' that has no length: pg only sends it when asked for SSL
          startup = false;
          const verdict = this.decide(msg);
          if (verdict === 'drop') return cutBoth();
          dst.write(raw);
          if (verdict === 'forward-then-drop') return cutBoth();
        }
      });
      // after a cut the upstream side is left to end gracefully (a destroy could reset it before
      // the server read the last message)
      src.on('close', () => cut || dst.destroy());
      src.on('error', () => cut || dst.destroy());
    };
    pipe('client', client, upstream);
    pipe('server', upstream, client);
    client.on('close', () => this.sockets.delete(client));
    upstream.on('close', () => this.sockets.delete(upstream));
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((res) => this.server?.close(() => res()) ?? res());
  }
}

/** The SQL text of a simple-query ('Q') message, else undefined. */
export const queryText = (m: PgMessage): string | undefined =>
  m.type === 'Q' ? m.body.subarray(0, m.body.length - 1).toString('utf8') : undefined;

/** The SQL of a simple query ('Q') or of a statement being prepared ('P': name, then text). */
export const sqlText = (m: PgMessage): string | undefined => (m.type === 'P' ? m.body.toString('utf8').split('\0')[1] : queryText(m));

/**
 * A PgProxy in front of the server of `dbUrl`, started before the calling describe block's tests
 * and stopped after them; `url()` is `dbUrl` through the proxy.
 */
export function proxiedDatabase(dbUrl: string): { proxy: PgProxy; url: () => string } {
  const proxy = new PgProxy('127.0.0.1', Number(new URL(dbUrl).port || 5432));
  let url = '';
  beforeAll(async () => {
    const u = new URL(dbUrl);
    u.host = await proxy.start();
    url = u.toString();
  });
  afterAll(() => proxy.stop());
  return { proxy, url: () => url };
}
