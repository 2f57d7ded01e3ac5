import { crc32 } from 'node:zlib';
import { CorruptLogError } from '../contracts/errors.js';

/**
 * Every value the LMDB store writes to its `events` and `heads` databases is *sealed*: `#`, the
 * CRC-32 of the JSON text as 8 hex digits, then the JSON text. Every read checks it, so a byte
 * changed on disk (a bit flip, a bad sector, a hand edit) is a CorruptLogError naming session
 * and seq, never a changed message read back as if it were the original.
 *
 * Migration rule: a value that starts with `{` was written before records were sealed. It is
 * read unchecked (its JSON and schema are still validated), never rewritten in place, and comes
 * back sealed from any rebuild of the LMDB file from the journal (`actorloop repair`, or the
 * rebuild after a machine restart). A value that starts with anything else is damaged.
 */

const MARK = '#';
const DIGITS = 8;

const hex = (text: string) => crc32(text).toString(16).padStart(DIGITS, '0');

/** The stored form of a record's or head's JSON text. */
export function seal(json: string): string {
  return `${MARK}${hex(json)}${json}`;
}

/**
 * The JSON text of a stored value after its checksum is checked; `sessionId` and `seq` (0 for a
 * head) name it in the CorruptLogError. A value that is not a string is passed through, for
 * `decodeRecord` to report.
 */
export function unseal(sessionId: string, seq: number, raw: unknown): unknown {
  if (typeof raw !== 'string' || raw.startsWith('{')) return raw; // unsealed: written before checksums
  const what = seq === 0 ? 'head record' : 'record';
  if (!raw.startsWith(MARK) || raw.length < 1 + DIGITS) {
    throw new CorruptLogError(
      sessionId,
      seq,
      `${what} is neither sealed (#<crc32>…) nor JSON (it starts with ${JSON.stringify(raw.slice(0, 12))})`,
    );
  }
  const json = raw.slice(1 + DIGITS);
  const stored = raw.slice(1, 1 + DIGITS);
  const actual = hex(json);
  if (stored !== actual) {
    throw new CorruptLogError(
      sessionId,
      seq,
      `${what} fails its checksum (stored crc32 ${stored}, computed ${actual} over ${json.length} characters): its bytes changed on disk`,
    );
  }
  return json;
}
