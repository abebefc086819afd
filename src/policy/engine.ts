// The compiled Rego policy behind every grant and execute decision (DESIGN §5). It loads
// policies/dist/policy.wasm with @open-policy-agent/opa-wasm, proves a new artefact against golden
// decisions before it serves, swaps artefacts with one reference, and fails closed: an exception,
// an undefined result or a malformed answer becomes a PolicyError, never an allow.
// The gotchas this code works around are numbered as in docs/research/opa-wasm.md §4.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type * as OpaWasm from '@open-policy-agent/opa-wasm';
import { ENTRYPOINTS, EXECUTE_ENTRYPOINT, firstGoldenMismatch, GRANTS_ENTRYPOINT, parseGolden, type Entrypoint, type GoldenCase } from './golden.ts';
import { PolicyError } from './types.ts';
import type { ExecuteInput, ExecuteOutput, GrantsInput, GrantsOutput, PolicyEngine } from './types.ts';
import { NamedError } from '../common/thrown.ts';

// The package's ESM entry exports only the async loader. Replacing a poisoned instance must happen
// synchronously, before the next decision, so both loaders come from the CommonJS export.
const opa = createRequire(import.meta.url)('@open-policy-agent/opa-wasm') as typeof OpaWasm;

// Node always provides the WebAssembly global, but the project's libs (ES2023, no DOM) do not
// declare it; this is the one call needed, typed narrowly. A compiled module is opaque here.
type CompiledModule = object;
const wasmApi = (globalThis as unknown as { WebAssembly: { compile(bytes: Uint8Array): Promise<CompiledModule> } }).WebAssembly;

export { EXECUTE_ENTRYPOINT, GRANTS_ENTRYPOINT } from './golden.ts';

const DEFAULT_MEMORY_MAX_PAGES = 1024; // 64 KiB pages: 64 MiB.
const INITIAL_MEMORY_PAGES = 5;

/** Evaluates a plugin operator for the policy's `agentgate.operator(name, operand, actual)`. */
export type OperatorEvaluator = (name: string, operand: unknown, actual: unknown) => boolean;

interface PolicyEngineOptions {
  wasmPath: string;
  goldenPath: string;
  /** Cap on the policy's linear memory in 64 KiB pages; it grows to the largest input and never shrinks. */
  memoryMaxPages?: number;
  /** Plugin operators (DESIGN §6). Without it every plugin operator is a violation. */
  operator?: OperatorEvaluator;
}

/** A new artefact (or its golden file) was refused; the previous one keeps serving. */
export class PolicyLoadError extends NamedError {}

/** One loaded artefact. Only `instance` ever changes: it is replaced after an exception. */
interface Artefact {
  module: CompiledModule;
  instance: OpaWasm.LoadedPolicy | null;
  entrypointIds: Record<Entrypoint, number>;
  sha256: string;
  loadedAtMs: number;
  generation: number;
}

export class WasmPolicyEngine implements PolicyEngine {
  readonly #options: PolicyEngineOptions;
  readonly #memoryMaxPages: number;
  readonly #builtins: Record<string, (...args: unknown[]) => boolean>;
  #active: Artefact | null = null;
  /** The answers of the decision being evaluated now (wasm runs synchronously, so one at a time). */
  #decisionOperator: OperatorEvaluator | undefined;
  /** How many wasm instances were replaced after an exception; info() reports it, /metrics exposes it. */
  #instanceReplacements = 0;
  /** Reloads run one at a time, so an older file can never be swapped in after a newer one. */
  #reloads: Promise<void> = Promise.resolve();

  constructor(options: PolicyEngineOptions) {
    const pages = options.memoryMaxPages ?? DEFAULT_MEMORY_MAX_PAGES;
    if (!Number.isInteger(pages) || pages < 1 || pages > 65536) throw new RangeError(`memoryMaxPages must be an integer in 1..65536, got ${pages}`);
    this.#options = options;
    this.#memoryMaxPages = pages;
    // An exception thrown inside a JS builtin corrupts the wasm instance (gotcha 3), so this one
    // never throws: a failure, like an answer that is not `true`, reads as a violation. A decision's
    // own answers (worked out in the plugin sandbox before it runs) take precedence over the default.
    this.#builtins = {
      'agentgate.operator': (name, operand, actual) => {
        const operator = this.#decisionOperator ?? options.operator;
        if (operator === undefined || typeof name !== 'string') return false;
        try {
          return operator(name, operand, actual) === true;
        } catch {
          return false;
        }
      },
    };
  }

  decideGrants(input: GrantsInput): GrantsOutput {
    const output = this.#evaluate(this.#require(), GRANTS_ENTRYPOINT, input);
    if (!isGrantsOutput(output, input)) throw new PolicyError(`${GRANTS_ENTRYPOINT} returned a malformed decision`);
    return output;
  }

  decideExecute(input: ExecuteInput, operator?: OperatorEvaluator): ExecuteOutput {
    let output: unknown;
    this.#decisionOperator = operator;
    try {
      output = this.#evaluate(this.#require(), EXECUTE_ENTRYPOINT, input);
    } finally {
      this.#decisionOperator = undefined;
    }
    if (!isExecuteOutput(output, input)) throw new PolicyError(`${EXECUTE_ENTRYPOINT} returned a malformed decision`);
    return output;
  }

  info(): { sha256: string; loadedAtMs: number; generation: number; instanceReplacements: number } {
    const active = this.#require();
    return { sha256: active.sha256, loadedAtMs: active.loadedAtMs, generation: active.generation, instanceReplacements: this.#instanceReplacements };
  }

  /**
   * Re-reads the artefact and its golden decisions, loads and checks them, then swaps them in.
   * Given `artefact`, those bytes are loaded instead of the file's (a previewed artefact, or a
   * promoted shadow), still checked against the golden decisions on disk. On any failure it throws
   * PolicyLoadError and the active artefact keeps serving.
   */
  reload(artefact?: Uint8Array): Promise<void> {
    const run = this.#reloads.then(() => this.#reload(artefact));
    this.#reloads = run.catch(() => undefined);
    return run;
  }

  /** The artefact file's bytes as they are on disk now: what a reload without bytes would load. */
  async readArtefact(): Promise<Buffer> {
    try {
      return await readFile(this.#options.wasmPath);
    } catch (error) {
      throw new PolicyLoadError(`cannot read the policy: ${describe(error)}`, { cause: error });
    }
  }

  async #reload(artefact: Uint8Array | undefined): Promise<void> {
    const { goldenPath } = this.#options;
    let bytes: Uint8Array;
    let golden: GoldenCase[];
    try {
      bytes = artefact ?? await readFile(this.#options.wasmPath);
      golden = parseGolden(await readFile(goldenPath, 'utf8'));
    } catch (error) {
      throw new PolicyLoadError(`cannot read the policy: ${describe(error)}`, { cause: error });
    }
    const next = await this.#load(bytes);
    const mismatch = firstGoldenMismatch(golden, (c) => this.#decideWith(next, c));
    if (mismatch) throw new PolicyLoadError(mismatch);
    next.generation = (this.#active?.generation ?? 0) + 1;
    next.loadedAtMs = Date.now();
    this.#active = next;
  }

  /** Serves `artefact` without golden decisions: only for candidates (loadCandidateEngine). */
  async installWithoutGolden(artefact: Uint8Array): Promise<void> {
    const next = await this.#load(artefact);
    next.generation = (this.#active?.generation ?? 0) + 1;
    next.loadedAtMs = Date.now();
    this.#active = next;
  }

  async #load(bytes: Uint8Array): Promise<Artefact> {
    let module: CompiledModule;
    let instance: OpaWasm.LoadedPolicy;
    try {
      // Compiling once keeps the Module, so replacing an instance later costs ~0.2 ms, not a compile.
      module = await wasmApi.compile(bytes);
      instance = await opa.loadPolicy(module, this.#memory(), this.#builtins);
    } catch (error) {
      throw new PolicyLoadError(`not a loadable policy artefact: ${describe(error)}`, { cause: error });
    }
    const ids = instance.entrypoints as Record<string, unknown>;
    const missing = ENTRYPOINTS.filter((e) => typeof ids[e] !== 'number');
    if (missing.length > 0) throw new PolicyLoadError(`the artefact lacks the entrypoint(s) ${missing.join(', ')}`);
    return {
      module,
      instance,
      entrypointIds: { [GRANTS_ENTRYPOINT]: ids[GRANTS_ENTRYPOINT] as number, [EXECUTE_ENTRYPOINT]: ids[EXECUTE_ENTRYPOINT] as number },
      sha256: createHash('sha256').update(bytes).digest('hex'),
      loadedAtMs: 0,
      generation: 0,
    };
  }

  /** Runs one golden case through the same checks as a live decision. */
  #decideWith(artefact: Artefact, c: GoldenCase): unknown {
    const output = this.#evaluate(artefact, c.entrypoint, c.input);
    const valid = c.entrypoint === GRANTS_ENTRYPOINT
      ? isGrantsOutput(output, c.input as unknown as GrantsInput)
      : isExecuteOutput(output, c.input as unknown as ExecuteInput);
    if (!valid) throw new PolicyError(`${c.entrypoint} returned a malformed decision`);
    return output;
  }

  /** The one place the wasm runs. Anything but exactly one result is a PolicyError. */
  #evaluate(artefact: Artefact, entrypoint: Entrypoint, input: object): unknown {
    const instance = artefact.instance ?? this.#reinstantiate(artefact);
    let resultSet: unknown;
    try {
      resultSet = instance.evaluate(input, artefact.entrypointIds[entrypoint]);
    } catch (error) {
      // Errors may be strings, plain objects or RangeErrors (gotcha 3), and the instance may be
      // corrupt afterwards: replace it before the next decision.
      artefact.instance = null;
      this.#instanceReplacements++;
      this.#tryReinstantiate(artefact);
      throw new PolicyError(`${entrypoint} failed: ${describe(error)}`, { cause: error });
    }
    if (!Array.isArray(resultSet) || resultSet.length !== 1) throw new PolicyError(`${entrypoint} is undefined for this input`);
    return (resultSet[0] as { result?: unknown }).result;
  }

  #reinstantiate(artefact: Artefact): OpaWasm.LoadedPolicy {
    try {
      artefact.instance = opa.loadPolicySync(artefact.module, this.#memory(), this.#builtins);
      return artefact.instance;
    } catch (error) {
      throw new PolicyError(`cannot instantiate the policy: ${describe(error)}`, { cause: error });
    }
  }

  /** Eager replacement; if it fails, the next decision tries again (and refuses if it fails too). */
  #tryReinstantiate(artefact: Artefact): void {
    try {
      this.#reinstantiate(artefact);
    } catch {
      // Left null on purpose.
    }
  }

  /** A fresh descriptor each time: loadPolicy mutates the one it is given (gotcha 6). */
  #memory(): { initial: number; maximum: number } {
    return { initial: Math.min(INITIAL_MEMORY_PAGES, this.#memoryMaxPages), maximum: this.#memoryMaxPages };
  }

  #require(): Artefact {
    if (this.#active === null) throw new PolicyError('no policy is loaded');
    return this.#active;
  }
}

/**
 * A candidate artefact from its bytes, for a preview or a shadow (preview.ts): its entrypoints are
 * checked, no golden decision is (a candidate is judged by what it would change, and a reload checks
 * the golden decisions before it serves). Throws PolicyLoadError when the bytes are not a policy.
 */
export async function loadCandidateEngine(artefact: Uint8Array, memoryMaxPages?: number): Promise<WasmPolicyEngine> {
  const engine = new WasmPolicyEngine({ wasmPath: '', goldenPath: '', ...(memoryMaxPages === undefined ? {} : { memoryMaxPages }) });
  await engine.installWithoutGolden(artefact);
  return engine;
}

/** Loads the artefact and its golden decisions; throws PolicyLoadError when either is refused. */
export async function loadPolicyEngine(options: PolicyEngineOptions): Promise<WasmPolicyEngine> {
  const engine = new WasmPolicyEngine(options);
  await engine.reload();
  return engine;
}

// ---------------------------------------------------------------------------------------------
// Output checks. Hand-written because they run on every decision; they check what callers rely
// on, and that an allow names a grant the caller actually passed in.
// ---------------------------------------------------------------------------------------------

const VERDICTS: ReadonlySet<unknown> = new Set(['grant', 'approval', 'deny']);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One well-formed decision per request: the decided capabilities are the requested ones. */
function isGrantsOutput(output: unknown, input: GrantsInput): output is GrantsOutput {
  if (!isRecord(output) || !Array.isArray(output.decisions) || !Array.isArray(input.requests)) return false;
  if (output.decisions.length !== input.requests.length) return false;
  const pending = new Map<string, number>();
  for (const r of input.requests) pending.set(r.capability, (pending.get(r.capability) ?? 0) + 1);
  for (const d of output.decisions as unknown[]) {
    if (!isRecord(d) || typeof d.capability !== 'string' || !VERDICTS.has(d.decision)) return false;
    if (d.reason !== undefined && typeof d.reason !== 'string') return false;
    if (d.constraints !== undefined && !isRecord(d.constraints)) return false;
    const left = pending.get(d.capability) ?? 0;
    if (left === 0) return false;
    pending.set(d.capability, left - 1);
  }
  return true;
}

function isExecuteOutput(output: unknown, input: ExecuteInput): output is ExecuteOutput {
  if (!isRecord(output) || typeof output.allow !== 'boolean' || !Array.isArray(output.violations)) return false;
  if (output.reason !== undefined && typeof output.reason !== 'string') return false;
  if (output.allow) {
    const grantId = output.grant_id;
    return output.violations.length === 0 && typeof grantId === 'string' && Array.isArray(input.grants) && input.grants.some((g) => g.id === grantId);
  }
  for (const v of output.violations as unknown[]) {
    if (!isRecord(v) || typeof v.field !== 'string' || !isRecord(v.constraint)) return false;
  }
  return true;
}

/** A readable message for anything thrown: wasm and the SDK throw strings and plain objects too. */
function describe(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === 'string') return error;
  if (isRecord(error) && typeof error.message === 'string') return error.message;
  return String(error);
}
