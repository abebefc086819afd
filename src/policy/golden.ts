// Golden decisions: inputs with the answers a policy artefact must give before it may serve
// (DESIGN §5). The service checks them on every load and reload (engine.ts), and the build checks
// them on every build (scripts/build-policy.mjs loads the artefact through the same engine), so
// the file's rules and the comparison live here once.
import { isDeepStrictEqual } from 'node:util';
import { z } from 'zod';

export const GRANTS_ENTRYPOINT = 'agentgate/grants';
export const EXECUTE_ENTRYPOINT = 'agentgate/execute';
export const ENTRYPOINTS = [GRANTS_ENTRYPOINT, EXECUTE_ENTRYPOINT] as const;
export type Entrypoint = (typeof ENTRYPOINTS)[number];

const goldenCaseSchema = z
  .object({
    name: z.string().min(1),
    entrypoint: z.enum(ENTRYPOINTS),
    input: z.record(z.string(), z.unknown()),
    expected: z.unknown(),
  })
  .refine((c) => 'expected' in c, { message: 'expected is required (null is a valid expectation; absent is not)' });

const goldenFileSchema = z
  .array(goldenCaseSchema)
  // A golden file that skips an entrypoint would let a broken half of the policy through.
  .superRefine((cases, ctx) => {
    for (const e of ENTRYPOINTS) {
      if (!cases.some((c) => c.entrypoint === e)) ctx.addIssue({ code: 'custom', message: `golden decisions must cover ${e}` });
    }
  });

export type GoldenCase = z.infer<typeof goldenCaseSchema>;

/** Parses a golden file; throws an Error naming the first problem (and the case's index). */
export function parseGolden(text: string): GoldenCase[] {
  const parsed = goldenFileSchema.safeParse(JSON.parse(text));
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const where = issue.path.length > 0 ? `golden decision #${issue.path.join('.')}` : 'golden decisions';
  throw new Error(`${where}: ${issue.message}`);
}

/**
 * Runs every case through `decide` and answers the first disagreement as a sentence, or null when
 * all agree. `decide` may throw; that is reported as the case failing.
 */
export function firstGoldenMismatch(cases: readonly GoldenCase[], decide: (c: GoldenCase) => unknown): string | null {
  for (const c of cases) {
    let actual: unknown;
    try {
      actual = decide(c);
    } catch (error) {
      return `golden decision "${c.name}" failed: ${error instanceof Error ? error.message : String(error)}`;
    }
    if (!isDeepStrictEqual(actual, c.expected)) {
      return `golden decision "${c.name}" differs: expected ${JSON.stringify(c.expected)}, got ${JSON.stringify(actual)}`;
    }
  }
  return null;
}
