import type { Message } from '../contracts/message.js';
import type { InputReceipt } from '../contracts/requests.js';
import type { SessionServices } from '../actors/session-services.js';

export interface QueuedInput {
  inputId: string;
  mode: 'steer' | 'follow_up';
  messages: Message[];
  status: InputReceipt['status'];
}

/** The session's inputs: accepted ones in order, and every receipt given (for idempotency). */
export class InputQueue {
  private readonly byId = new Map<string, QueuedInput>();
  private pending: QueuedInput[] = [];

  constructor(initial: QueuedInput[] = []) {
    for (const i of initial) this.add(i);
  }

  get(inputId: string): QueuedInput | undefined {
    return this.byId.get(inputId);
  }

  add(input: QueuedInput): void {
    this.byId.set(input.inputId, input);
    if (input.status === 'accepted') this.pending.push(input);
  }

  /** Removes and returns every pending steer input, marking them consumed. */
  takeSteers(): QueuedInput[] {
    const steers = this.pending.filter((i) => i.mode === 'steer');
    this.pending = this.pending.filter((i) => i.mode !== 'steer');
    for (const s of steers) s.status = 'consumed';
    return steers;
  }

  /**
   * Removes and returns the input that starts the next run on a free session, marking it
   * consumed: the oldest pending one of either mode. A steer still pending here came after its
   * run's last model call (or on an idle session): it runs as a run of its own, as a follow-up does.
   */
  takeNext(): QueuedInput | undefined {
    const f = this.pending.shift();
    if (f) f.status = 'consumed';
    return f;
  }

  get hasSteer(): boolean {
    return this.pending.some((x) => x.mode === 'steer');
  }

  /** Whether an accepted input waits (a follow-up, or a steer no running run has taken). */
  get hasWaiting(): boolean {
    return this.pending.length > 0;
  }

  cancel(inputId: string): boolean {
    const i = this.pending.findIndex((x) => x.inputId === inputId);
    if (i < 0) return false;
    this.pending.splice(i, 1)[0]!.status = 'cancelled';
    return true;
  }

  receipt(i: QueuedInput): InputReceipt {
    return { inputId: i.inputId, status: i.status, durability: 'durable' };
  }
}

/** The session services' view of the steer inputs: whether any waits, and taking them. */
export function steersOf(inputs: InputQueue): Pick<SessionServices, 'steersWaiting' | 'takeSteers'> {
  return {
    steersWaiting: () => inputs.hasSteer,
    takeSteers: () => inputs.takeSteers().map((i) => ({ inputId: i.inputId, messages: i.messages })),
  };
}
