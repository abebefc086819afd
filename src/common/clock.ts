// Time is a dependency so lifecycle tests move it instead of sleeping.

export interface Clock {
  nowMs(): number;
}

export const systemClock: Clock = { nowMs: () => Date.now() };

/** A clock tests set and advance by hand. */
export class ManualClock implements Clock {
  private currentMs: number;
  constructor(startMs: number = Date.now()) {
    this.currentMs = startMs;
  }
  nowMs(): number {
    return this.currentMs;
  }
  advance(ms: number): void {
    this.currentMs += ms;
  }
  set(ms: number): void {
    this.currentMs = ms;
  }
}
