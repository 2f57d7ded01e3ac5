import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repairStore, verifyStore } from '../../src/index.js';
import { tempDir } from '../helpers/tmp.js';
import { tempDirs } from '../helpers/temp-dirs.js';
import { killAllChildren } from '../crash/child-util.js';
import { flipInPages, metaRoots, pagesHolding, writeVariedStore } from './fixtures/page-flips.js';
import { useInChild } from './fixtures/page-flips-child.js';

/**
 * Whatever damage kills a reader or a writer of data.mdb, `verifyStore` finds, and `repairStore`
 * then rebuilds data.mdb from the journal. Each case flips one bit of a page header (24 bytes:
 * page number, txnid, pad, flags, lower/upper) of chosen pages of a varied store (sessions,
 * overflow records, surface chunks, inbox entries, a free-page list), in a copy; a child process
 * reads every session and then writes to each (fixtures/store-user.ts), and `verifyStore` runs on
 * another copy. A flipped high bit of a page's txnid is the case reads never see: LMDB takes the
 * page for one the current write transaction may change in place, and the writer that touches
 * it dies of SIGSEGV. test/persistence/page-flips-sweep.ts runs the same check over seeded flips
 * of every page's header.
 */
const dir = tempDirs('actorloop-fatal-', killAllChildren);

let base: string;
let expected: Record<string, string[]>;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  const made = tempDir('actorloop-fatal-base-');
  cleanup = made.cleanup;
  base = made.path;
  expected = await writeVariedStore(base);
});
afterAll(() => cleanup());

interface Case {
  rule: string;
  pages: (file: string) => number[];
  offset: number;
  bit: number;
  /** Whether the reader or writer child dies of it (the damage this file is about), or reads and writes untroubled. */
  kills: 'writer' | 'reader' | 'nobody';
  /** Whether the case repairs the copy and reads it back (the rebuild is the same for every case, and verify-and-repair.test.ts repairs a reader's death: one case here, to keep the file short). */
  repair?: true;
}

const TXNID_HIGH = { offset: 14, bit: 2 }; // bit 50 of the txnid: far above any transaction id

const cases: Case[] = [
  {
    rule: 'a high txnid bit of the leaf a session appends to',
    pages: (f) => pagesHolding(f, 'a-60 x'),
    ...TXNID_HIGH,
    kills: 'writer',
    repair: true,
  },
  {
    rule: 'a high txnid bit of the inbox leaf (a database the record walk never reads)',
    pages: (f) => pagesHolding(f, 'c-long-2'),
    ...TXNID_HIGH,
    kills: 'writer',
  },
  { rule: "a high txnid bit of the main database's root page", pages: (f) => [metaRoots(f).mainRoot], ...TXNID_HIGH, kills: 'writer' },
  { rule: "a high txnid bit of the free-page list's root page", pages: (f) => [metaRoots(f).freeRoot], ...TXNID_HIGH, kills: 'writer' },
  {
    rule: 'a flag bit of a leaf of the events (a leaf read as a branch)',
    pages: (f) => pagesHolding(f, 'b-20 x'),
    offset: 18,
    bit: 1,
    kills: 'reader',
  },
  {
    rule: 'a bit of the pad field of a leaf (unused outside LEAF2 pages)',
    pages: (f) => pagesHolding(f, 'a-60 x'),
    offset: 16,
    bit: 3,
    kills: 'nobody',
  },
];

describe('verifyStore finds every page-header flip that kills a reader or a writer, and repairStore rebuilds data.mdb', () => {
  for (const c of cases) {
    it(`${c.rule}: ${c.kills === 'nobody' ? 'nothing dies and verify reports ok' : `the ${c.kills} dies of a signal, verify reports data.mdb damaged${c.repair ? ', and after repair every acknowledged event reads back' : ''}`}`, async () => {
      const root = dir();
      const [verified, used] = [join(root, 'verified'), join(root, 'used')];
      cpSync(base, verified, { recursive: true });
      const file = join(verified, 'data.mdb');
      const pages = c.pages(file);
      expect(pages.length, 'the page to flip is found').toBeGreaterThan(0);
      flipInPages(file, pages, c.offset, c.bit);
      cpSync(verified, used, { recursive: true });
      const [use, report] = await Promise.all([useInChild(used), verifyStore(verified)]);
      if (c.kills === 'nobody') {
        expect({ exit: use.exit, phase: use.phase }, use.stderr).toEqual({ exit: { code: 0, signal: null }, phase: 'done' });
        expect(use.read).toEqual(expected);
        expect(report).toMatchObject({ ok: true });
        return;
      }
      expect(use.exit.signal, `the ${c.kills} dies (phase ${use.phase}): ${use.stderr.slice(-300)}`).not.toBeNull();
      expect(use.phase).toBe(c.kills === 'reader' ? 'read' : 'write');
      expect(report.ok, 'verify reports the damage that killed it').toBe(false);
      expect(!report.ok && report.problems).toContainEqual(expect.objectContaining({ where: 'data.mdb' }));
      if (!c.repair) return;
      const { repaired, actions, after } = await repairStore(verified);
      expect({ repaired, ok: after.ok }).toEqual({ repaired: true, ok: true });
      expect(actions).toContain('rebuilt data.mdb from the journal');
      const back = await useInChild(verified);
      expect({ exit: back.exit, phase: back.phase }, back.stderr).toEqual({ exit: { code: 0, signal: null }, phase: 'done' });
      expect(back.read).toEqual(expected);
    });
  }
});
