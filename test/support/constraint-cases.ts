// The constraint cases (test/cases/constraints.json), one set of data run through the compiled
// policy (test/unit/policy.constraints.test.ts) and through signed HTTP executes
// (test/integration/policy.parity.test.ts), so the two cannot drift.
import { readFileSync } from 'node:fs';
import type { Violation } from '../../src/policy/types.ts';

export interface ConstraintCase {
  name: string;
  /** When set, the grant is refused at grant time with this code (the case never executes). */
  grantTime?: string;
  constraints: Record<string, unknown> | null;
  other_grants?: Array<Record<string, unknown> | null>;
  arguments: Record<string, unknown>;
  expected: { allow: boolean; grant?: number; violations: Violation[] };
}

export const CONSTRAINT_CASES = JSON.parse(readFileSync(new URL('../cases/constraints.json', import.meta.url), 'utf8')) as ConstraintCase[];
