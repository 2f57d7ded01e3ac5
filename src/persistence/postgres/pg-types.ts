/**
 * The parts of the `pg` package the PostgreSQL store uses, as structural types: `pg` is an
 * optional peer dependency, so its own types must not appear in actorloop's published `.d.ts`
 * (an app without `pg` installed still type-checks). A `pg.Pool` satisfies `PgPool`.
 */

/** A query's result: the rows, as objects keyed by column name. */
export interface PgResult {
  rows: unknown[];
  rowCount: number | null;
}

/** A query as `pg` takes it; `name` makes it a prepared statement on each connection. */
export interface PgQuery {
  text: string;
  values?: unknown[];
  name?: string;
}

/** A connection checked out of a pool. */
export interface PgPoolClient {
  query(query: PgQuery): Promise<PgResult>;
  query(text: string): Promise<PgResult>;
  /** `release(true)` (or an error) destroys the connection instead of returning it to the pool. */
  release(destroy?: boolean | Error): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'notification', listener: (msg: { channel: string; payload?: string }) => void): unknown;
  removeListener(event: 'error', listener: (err: Error) => void): unknown;
}

/**
 * A connection pool (`new pg.Pool(config)`).
 * @example
 * import pg from 'pg'
 * const store = postgresStore({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) })
 */
export interface PgPool {
  connect(): Promise<PgPoolClient>;
  end(): Promise<void>;
  on(event: 'error', listener: (err: Error) => void): unknown;
  /** Emitted as a client is handed out, before `connect()` resolves (pg-pool). */
  on(event: 'acquire', listener: (client: PgPoolClient) => void): unknown;
}

/** The module `pg`, as loaded on first use. */
export interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPool;
}

/** A server error as `pg` reports it: SQLSTATE in `code`. */
export function sqlStateOf(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}
