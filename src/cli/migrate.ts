import { migratePostgres } from '../persistence/postgres/postgres-store.js';
import type { CommandIO } from './commands.js';
import { PostgresUrl } from './data.js';
import { CliError, DATABASE_URL_ENV, EXIT, parseArg, redactUrl } from './errors.js';

/**
 * `actorloop migrate --postgres <url>`: applies the package's PostgreSQL migrations (under the
 * same advisory lock a store's first use takes) and says which version the schema is at.
 */
export async function migrateCommand(opts: { postgres?: string; schema?: string }, io: CommandIO): Promise<number> {
  if (opts.postgres === undefined) throw new CliError(`migrate needs --postgres <url> (or ${DATABASE_URL_ENV})`, EXIT.usage);
  const url = parseArg(PostgresUrl, opts.postgres, '--postgres');
  const { from, to } = await migratePostgres({ connectionString: url, ...(opts.schema ? { schema: opts.schema } : {}) });
  const schema = opts.schema ?? 'actorloop';
  io.out.write(
    from === to
      ? `schema ${schema} in ${redactUrl(url)} is at version ${to}: nothing to do\n`
      : `schema ${schema} in ${redactUrl(url)}: migrated from version ${from} to ${to}\n`,
  );
  return EXIT.ok;
}
