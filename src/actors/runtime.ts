import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { StoreClosedError } from '../contracts/errors.js';
import { parseInput } from '../contracts/validate.js';
import { canonicalJson } from '../persistence/codec.js';
import { lmdbStore } from '../persistence/lmdb-store.js';
import type { EventStore } from '../persistence/event-store.js';
import { EnvelopeStream } from '../streams/envelopes.js';
import { ExecutionSession } from './execution-session.js';
import { LogWriter } from './log-writer.js';
import type { RunEnv } from './run-env.js';
import { RuntimeOptions, type ResolvedRuntimeOptions } from './runtime-options.js';
import { estimateTokens, sha256, Surface } from './surface.js';
import type { Message } from '../contracts/message.js';

export interface Runtime {
  readonly store: EventStore;
  /** sha256 hex of the canonical execution profile (model id, prompts, tool catalog, config, budget). */
  readonly executionProfileFingerprint: string;
  /** Attaches a writer (fencing any older one), writes `session/attached` and loads the surface. */
  openSession(sessionId: string): Promise<ExecutionSession>;
  /** Closes every session, then the store. */
  close(): Promise<void>;
}

/**
 * Creates a runtime (DESIGN §6). `store` defaults to `lmdbStore({ path: './.actorloop' })`.
 * @example
 * const runtime = createRuntime({ model: scriptedModel(['Hello!']), store: memoryStore() })
 * const session = await runtime.openSession('s1')
 * const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })
 * await runtime.close()
 */
export function createRuntime(options: RuntimeOptions): Runtime {
  const o = parseInput(RuntimeOptions, options, 'createRuntime');
  const store = o.store ?? lmdbStore({ path: './.actorloop' });
  const toolSpecs = o.tools.map((t) => t.spec);
  const toolCatalog = o.tools.map((t) => ({ ...t.spec, mode: t.mode, resources: Array.isArray(t.resources) ? t.resources : 'dynamic' }));
  const prefix: Message[] = [...(o.systemPrompt !== undefined ? [{ role: 'system' as const, content: o.systemPrompt }] : []), ...o.bootstrapMessages];
  const fingerprint = sha256(
    canonicalJson({ modelId: o.model.modelId, systemPrompt: o.systemPrompt ?? null, bootstrapMessages: o.bootstrapMessages, tools: toolCatalog, config: o.config, budget: o.budget }),
  );
  const sessions = new Set<ExecutionSession>();
  let closed = false;

  return {
    store,
    executionProfileFingerprint: fingerprint,
    async openSession(sessionId: string) {
      parseInput(z.string().min(1).max(400), sessionId, 'openSession: sessionId');
      if (closed) throw new StoreClosedError('runtime');
      const attach = await store.attachWriter(sessionId);
      const sessionInstanceId = randomUUID();
      const surface = new Surface();
      surface.apply(await store.loadSurface(sessionId));
      const stream = new EnvelopeStream();
      let session: ExecutionSession | undefined;
      const writer = new LogWriter(store, sessionId, attach.writerEpoch, attach.lastSeq + 1, (records) => session?.onCommitted(records));
      const env: RunEnv = {
        sessionId,
        sessionInstanceId,
        writer,
        surface,
        model: o.model,
        tools: new Map(o.tools.map((t) => [t.name, t])),
        toolSpecs,
        toolCatalogDigest: sha256(canonicalJson(toolCatalog)),
        prefix,
        prefixDigest: sha256(canonicalJson(prefix)),
        prefixTokens: prefix.reduce((n, m) => n + estimateTokens(m), 0),
        config: o.config,
        budget: o.budget,
        ...(o.pricing ? { pricing: o.pricing } : {}),
        ...(o.delivery ? { delivery: o.delivery } : {}),
        ...(o.verifier ? { verifier: o.verifier } : {}),
        ...(o.finalVerifier ? { finalVerifier: o.finalVerifier } : {}),
        heldLocks: new Set(),
        cancelSignal: new AbortController().signal,
        emit: (event, logSeq) => stream.publish(event, logSeq),
      };
      writer.stage('session/attached', { turn: 0, step: 0, attempt: 0 }, { sessionInstanceId, writerEpoch: attach.writerEpoch });
      await writer.commit();
      session = new ExecutionSession(sessionId, sessionInstanceId, env, store, o as ResolvedRuntimeOptions, stream, fingerprint, attach.lastTurn, attach.writerEpoch);
      sessions.add(session);
      const close = session.close.bind(session);
      session.close = async () => {
        sessions.delete(session!);
        await close();
      };
      return session;
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const s of [...sessions]) await s.close();
      await store.close();
    },
  };
}
