import { Observable, Subject } from 'rxjs';
import type { EventRecord } from '../contracts/events.js';
import type { ReadRange } from './event-store.js';

/** In-process fan-out of committed records, per session, for `store.events$`. */
export class LiveAppends {
  private readonly subjects = new Map<string, Subject<EventRecord>>();

  publish(sessionId: string, records: readonly EventRecord[]): void {
    const s = this.subjects.get(sessionId);
    if (!s) return;
    for (const r of records) s.next(r);
  }

  complete(): void {
    for (const s of this.subjects.values()) s.complete();
    this.subjects.clear();
  }

  /**
   * Replays `read` from `fromSeq`, then follows live appends. Live records that arrive during the
   * replay are buffered and emitted after it, each seq exactly once and in order.
   */
  follow(sessionId: string, fromSeq: number, read: (range: ReadRange) => AsyncIterable<EventRecord>): Observable<EventRecord> {
    return new Observable<EventRecord>((subscriber) => {
      let subject = this.subjects.get(sessionId);
      if (!subject) {
        subject = new Subject<EventRecord>();
        this.subjects.set(sessionId, subject);
      }
      let next = fromSeq;
      let replaying = true;
      const buffered: EventRecord[] = [];
      const emit = (r: EventRecord) => {
        if (r.seq < next) return;
        if (r.seq > next) {
          subscriber.error(new Error(`events$ gap in session ${sessionId}: expected seq ${next}, got ${r.seq}`));
          return;
        }
        next = r.seq + 1;
        subscriber.next(r);
      };
      const live = subject.subscribe({
        next: (r) => (replaying ? buffered.push(r) : emit(r)),
        complete: () => subscriber.complete(),
      });
      (async () => {
        for await (const r of read({ fromSeq })) {
          if (subscriber.closed) return;
          emit(r);
        }
        replaying = false;
        for (const r of buffered.splice(0)) emit(r);
      })().catch((e) => subscriber.error(e));
      return () => {
        live.unsubscribe();
        if (subject && !subject.observed) this.subjects.delete(sessionId);
      };
    });
  }
}
