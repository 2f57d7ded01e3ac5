import { isStoreUnavailableError } from '../contracts/errors.js';
import type { PgModule } from '../persistence/postgres/pg-types.js';
import { sqlStateOf } from '../persistence/postgres/pg-types.js';
import { SCHEMA_VERSION_PG, versionOf } from '../persistence/postgres/schema.js';
import { CliError, EXIT, redactUrl } from './errors.js';
import { command } from './invocation.js';

/** The database a command used: the URL, and whether it came from ACTORLOOP_DATABASE_URL (not `--postgres`). */
export interface PostgresTarget {
  url: string;
  fromEnv: boolean;
  schema?: string;
}

/** SQLSTATE invalid_catalog_name: the database named in the URL does not exist. */
const NO_SUCH_DATABASE = '3D000';

/**
 * What a command's failure on a PostgreSQL log means for the CLI (docs/cli.md, exit codes), with
 * the same codes as on a data dir: a database that does not exist, or a schema without actorloop's
 * tables, is "not found" (exit 4, like a missing data dir); a schema this version must migrate
 * first is exit 1, and one newer than this version exit 3 (like a log written by a newer schema
 * version). The migrate hint names the database given (`--postgres URL`, its password hidden; no
 * flag when ACTORLOOP_DATABASE_URL named it). Anything else is returned as it is.
 * @example
 * code.catch(async (e) => { throw await explainPostgresFailure(e, { url, fromEnv: false }) })
 */
export async function explainPostgresFailure(e: unknown, target: PostgresTarget): Promise<unknown> {
  if (!isStoreUnavailableError(e)) return e;
  const where = redactUrl(target.url);
  if ((e.sqlState ?? sqlStateOf(e.cause)) === NO_SUCH_DATABASE) {
    const name = decodeURIComponent(new URL(target.url).pathname.slice(1));
    return new CliError(`no database ${JSON.stringify(name)} at ${where}: create it, or name another database`, EXIT.notFound);
  }
  const schema = target.schema ?? 'actorloop';
  const version = await schemaVersion(target.url, schema);
  if (version === undefined || version === SCHEMA_VERSION_PG) return e;
  const flags = `${target.fromEnv ? '' : ` --postgres ${where}`}${schema === 'actorloop' ? '' : ` --schema ${schema}`}`;
  const migrate = `\`${command(`migrate${flags}`)}\``;
  const named = `schema ${JSON.stringify(schema)}`;
  if (version === 0) {
    const hint = `run ${migrate} to create them (the demo creates them on first use)`;
    return new CliError(`no actorloop tables in ${named} of ${where}: ${hint}`, EXIT.notFound);
  }
  if (version < SCHEMA_VERSION_PG) {
    const needs = `this version of actorloop needs ${SCHEMA_VERSION_PG}`;
    return new CliError(`PostgreSQL ${named} in ${where} is at version ${version}, ${needs}: run ${migrate}`, EXIT.failure);
  }
  return new CliError(e.message, EXIT.corrupt);
}

/** The schema's version as the store reads it, or undefined when the database cannot be asked. */
async function schemaVersion(url: string, schema: string): Promise<number | undefined> {
  try {
    const specifier = 'pg';
    const mod = (await import(specifier)) as { default?: PgModule } & PgModule;
    const pool = new (mod.default ?? mod).Pool({ connectionString: url, max: 1 });
    pool.on('error', () => undefined);
    try {
      const c = await pool.connect();
      try {
        return await versionOf(c, schema);
      } finally {
        c.release();
      }
    } finally {
      await pool.end();
    }
  } catch {
    return undefined;
  }
}
