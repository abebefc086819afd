// The capability catalog (DESIGN §7): what agents may ask for and how each capability runs. Loaded
// and validated once at start-up; input schemas are compiled then, not per request.
import { readFile } from 'node:fs/promises';
import { Ajv, type ValidateFunction } from 'ajv';
import { z } from 'zod';

const jsonSchemaObject = z.record(z.string(), z.unknown());

const handlerSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('echo') }).strict(),
  /** Always fails: a demonstration of how backend failures surface (500 internal_error). */
  z.object({ type: z.literal('fail') }).strict(),
  z
    .object({
      type: z.literal('http'),
      url: z.url({ protocol: /^https?$/ }),
      method: z.enum(['POST', 'PUT', 'PATCH']).default('POST'),
      timeoutMs: z.number().int().min(1).max(120_000).default(10_000),
    })
    .strict(),
]);

const capabilitySchema = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'letters, digits, _ . : - (at most 128)'),
    description: z.string().min(1).max(2000),
    input: jsonSchemaObject.optional(),
    output: jsonSchemaObject.optional(),
    location: z.url({ protocol: /^https?$/ }).optional(),
    /** Listed to anonymous callers of GET /capability/list. */
    public: z.boolean().default(true),
    /**
     * What a person must show to approve it (protocol §10): a fresh sign-in, or for capabilities
     * that change things, also proof of presence (a passkey with user verification, bound to that
     * approval), since an agent that controls a browser could otherwise click "approve" itself.
     */
    approval_strength: z.enum(['sign_in', 'presence']).default('sign_in'),
    /** Optional per-agent budget for this capability (protocol §11.5: tighter for high-risk ones). */
    rateLimit: z.object({ points: z.number().int().min(1).max(10_000_000), durationSeconds: z.number().int().min(1).max(86_400 * 31) }).strict().optional(),
    handler: handlerSchema,
  })
  .strict();
type CapabilityDefinition = z.infer<typeof capabilitySchema>;

export const catalogFileSchema = z.object({ capabilities: z.array(capabilitySchema).max(10_000) }).strict();

export interface Capability extends CapabilityDefinition {
  /** Compiled `input` schema; absent input accepts any arguments object. */
  validateInput: ValidateFunction | null;
  /** Top-level fields the input schema types as number/integer (for numeric-string coercion). */
  numericFields: ReadonlySet<string>;
  /** The arguments the input schema declares (`properties`): the only names a constraint may use. */
  declaredArguments: ReadonlySet<string>;
  /**
   * Whether arguments outside `declaredArguments` are refused. A schema that lists properties is
   * closed unless it says `additionalProperties` itself; a schema that lists none takes anything.
   */
  closed: boolean;
}

export class Catalog {
  private readonly byName = new Map<string, Capability>();
  /** Names removed at run time by an administrator (this instance only). */
  private readonly disabled = new Set<string>();

  constructor(capabilities: Capability[]) {
    for (const capability of capabilities) {
      if (this.byName.has(capability.name)) throw new Error(`capability ${capability.name} is defined twice`);
      this.byName.set(capability.name, capability);
    }
  }

  get(name: string): Capability | undefined {
    return this.disabled.has(name) ? undefined : this.byName.get(name);
  }

  has(name: string): boolean {
    return this.get(name) !== undefined;
  }

  /** The arguments a capability declares; undefined when the catalog has no such capability. */
  readonly declaredArguments = (name: string): ReadonlySet<string> | undefined => this.get(name)?.declaredArguments;

  /** Every enabled capability in catalog order. */
  list(): Capability[] {
    return [...this.byName.values()].filter((c) => !this.disabled.has(c.name));
  }

  /** Disables (true) or re-enables (false) a capability; false when the name is unknown. */
  setRemoved(name: string, removed: boolean): boolean {
    if (!this.byName.has(name)) return false;
    if (removed) this.disabled.add(name);
    else this.disabled.delete(name);
    return true;
  }
}

/**
 * The schema execute validates with: one that lists properties is closed unless it says otherwise,
 * so an argument nobody declared (a look-alike of a declared name, say) is refused rather than
 * passed to the capability beside the constrained one.
 */
function closedSchema(input: Record<string, unknown>): { schema: Record<string, unknown>; closed: boolean } {
  const listsProperties = input.properties !== null && typeof input.properties === 'object';
  if (!listsProperties) return { schema: input, closed: false };
  if (Object.hasOwn(input, 'additionalProperties')) return { schema: input, closed: input.additionalProperties === false };
  return { schema: { ...input, additionalProperties: false }, closed: true };
}

function numericFieldsOf(input: Record<string, unknown> | undefined): Set<string> {
  const fields = new Set<string>();
  const properties = input?.properties;
  if (!properties || typeof properties !== 'object') return fields;
  for (const [field, schema] of Object.entries(properties as Record<string, unknown>)) {
    const type = (schema as { type?: unknown } | null)?.type;
    const types = Array.isArray(type) ? type : [type];
    if (types.includes('number') || types.includes('integer')) fields.add(field);
  }
  return fields;
}

/** Builds a catalog from parsed definitions, compiling every input schema (throws on a bad one). */
export function buildCatalog(definitions: CapabilityDefinition[]): Catalog {
  const ajv = new Ajv({ allErrors: false, strict: false });
  const capabilities = definitions.map((definition): Capability => {
    let validateInput: ValidateFunction | null = null;
    const { schema, closed } = definition.input ? closedSchema(definition.input) : { schema: undefined, closed: false };
    try {
      validateInput = schema ? ajv.compile(schema) : null;
    } catch (err) {
      throw new Error(`capability ${definition.name}: input is not a valid JSON Schema: ${(err as Error).message}`);
    }
    const properties = definition.input?.properties;
    const declaredArguments = new Set(properties !== null && typeof properties === 'object' ? Object.keys(properties) : []);
    return { ...definition, validateInput, numericFields: numericFieldsOf(definition.input), declaredArguments, closed };
  });
  return new Catalog(capabilities);
}

/** Reads and validates the catalog file; the error names the file and every problem. */
export async function loadCatalog(path: string): Promise<Catalog> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new Error(`capability catalog ${path}: ${(err as Error).message}`);
  }
  const parsed = catalogFileSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new Error(`capability catalog ${path}: ${problems}`);
  }
  return buildCatalog(parsed.data.capabilities);
}
