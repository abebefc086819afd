// Recorded policy decisions: what the live policy was asked and what it answered, kept so that a
// candidate artefact can be previewed against real traffic before it serves (preview.ts). A record
// holds the redacted input and output (redaction.ts), the sha256 of the artefact that decided and,
// for execute, the plugin operator answers the decision used, so the decision can be re-run without
// the plugin sandbox. Records come back from a store, so everything read is checked and bounded.
import type { OperatorEvaluator } from './engine.ts';
import { NamedError } from '../common/thrown.ts';

export type DecisionEntrypoint = 'agentgate/grants' | 'agentgate/execute';

/** One recorded policy decision: what the live policy was asked and what it answered. */
export interface DecisionRecord {
  /** The store's id (a stream id), absent before it is stored. */
  id?: string;
  /** When it was decided, ISO 8601. */
  at: string;
  entrypoint: DecisionEntrypoint;
  /** The sha256 of the artefact that decided. */
  sha256: string;
  /** The policy input, redacted (redaction.ts). */
  input: Record<string, unknown>;
  /** The live policy's output, redacted the same way (an execute violation's `actual` is an argument's value). */
  output: unknown;
  /** Execute only: the plugin operator answers the decision used, so the decision can be re-run without the sandbox. */
  operatorAnswers?: Array<[name: string, operand: unknown, actual: unknown, answer: boolean]>;
  /**
   * Set when the live policy answered the redacted input differently from the real one: the
   * decision depends on a redacted value, so a preview cannot re-run it faithfully.
   */
  redactionDependent?: true;
}

export type OperatorAnswer = [name: string, operand: unknown, actual: unknown, answer: boolean];

/** The most a record's input, output or operator answers may weigh as JSON (UTF-8). */
export const MAX_RECORD_PART_BYTES = 64 * 1024;
/** The most operator answers one record may hold: the grant caps keep real decisions far below it. */
export const MAX_OPERATOR_ANSWERS = 64;
/** How deeply a recorded JSON value may nest; the redaction replaces deeper subtrees anyway. */
export const MAX_JSON_DEPTH = 64;

const MAX_ID_LENGTH = 128;
const MAX_OPERATOR_NAME_LENGTH = 128;
/** A JSON text of 64 KiB holds at most about 32 Ki values ("[0,0,...]"), so a walk may stop well past that. */
const MAX_JSON_NODES = 64 * 1024;

const SHA256_HEX = /^[0-9a-f]{64}$/;
// An ISO 8601 timestamp as Date.prototype.toISOString writes it, or with an offset instead of Z.
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
const VERDICTS: ReadonlySet<unknown> = new Set(['grant', 'approval', 'deny']);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * One string per JSON value, equal for equal values whatever their members' order: the policy hands
 * values back after a trip through wasm, which sorts object keys. Null when the value nests deeper
 * than MAX_JSON_DEPTH or is not JSON (a bigint, a function), so callers can refuse to match it
 * rather than match two different values that were cut at the same place.
 */
export function canonicalJson(value: unknown): string | null {
  return canonicalAt(value, 0);
}

function canonicalAt(value: unknown, depth: number): string | null {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return JSON.stringify(value);
  // JSON has no non-finite numbers; JSON.stringify writes them as null, and so does this.
  if (typeof value === 'number') return JSON.stringify(value);
  if (typeof value !== 'object') return null;
  if (depth >= MAX_JSON_DEPTH) return null;
  if (Array.isArray(value)) {
    let text = '[';
    // Bounded by the array itself, which a caller bounded (a parsed record, a decision's input).
    for (let i = 0; i < value.length; i++) {
      const item = value[i] === undefined ? 'null' : canonicalAt(value[i], depth + 1);
      if (item === null) return null;
      text += i === 0 ? item : `,${item}`;
    }
    return `${text}]`;
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  let text = '{';
  let first = true;
  for (const key of keys) {
    // JSON leaves undefined members out; so does this, so a value and its JSON round trip agree.
    if (record[key] === undefined) continue;
    const member = canonicalAt(record[key], depth + 1);
    if (member === null) return null;
    text += `${first ? '' : ','}${JSON.stringify(key)}:${member}`;
    first = false;
  }
  return `${text}}`;
}

/**
 * What is wrong with a value as a bounded JSON document, or null when nothing is: only plain JSON
 * values, nested at most MAX_JSON_DEPTH deep, at most `maxBytes` as UTF-8 JSON. The walk stops at
 * MAX_JSON_NODES values, so a huge value costs no more than a refused one.
 */
export function jsonValueProblem(value: unknown, maxBytes: number): string | null {
  const walk: JsonWalk = { nodesLeft: MAX_JSON_NODES, boundBytes: 0 };
  const shape = jsonShapeProblem(value, 0, walk);
  if (shape !== null) return shape;
  // The walk's bound is generous (every character escaped), so almost every record is settled here
  // without serialising it; the preview checks every record it reads, 100,000 at a time.
  if (walk.boundBytes <= maxBytes) return null;
  // Safe now: the value is JSON, shallow enough for JSON.stringify's recursion and of bounded size.
  const bytes = Buffer.byteLength(JSON.stringify(value));
  return bytes > maxBytes ? `is ${bytes} bytes of JSON, more than ${maxBytes}` : null;
}

interface JsonWalk {
  nodesLeft: number;
  /** An upper bound of the JSON's UTF-8 size so far: a UTF-16 unit takes at most 6 bytes (\uXXXX). */
  boundBytes: number;
}

/** The most bytes a JSON number takes (-1.7976931348623157e+308), and a string's per character. */
const NUMBER_BOUND_BYTES = 24;
const CHARACTER_BOUND_BYTES = 6;

function jsonShapeProblem(value: unknown, depth: number, walk: JsonWalk): string | null {
  if (--walk.nodesLeft < 0) return `holds more than ${MAX_JSON_NODES} values`;
  // Every value may be followed by a comma; counting one for each keeps the bound simple.
  walk.boundBytes += 1;
  if (value === null || typeof value === 'boolean') {
    walk.boundBytes += 5;
    return null;
  }
  if (typeof value === 'string') {
    walk.boundBytes += 2 + CHARACTER_BOUND_BYTES * value.length;
    return null;
  }
  if (typeof value === 'number') {
    walk.boundBytes += NUMBER_BOUND_BYTES;
    return Number.isFinite(value) ? null : 'holds a number JSON cannot hold';
  }
  if (typeof value !== 'object') return `holds a value of type ${typeof value}, which JSON cannot hold`;
  if (depth >= MAX_JSON_DEPTH) return `nests deeper than ${MAX_JSON_DEPTH} levels`;
  walk.boundBytes += 2;
  if (Array.isArray(value)) {
    for (const item of value) {
      const problem = jsonShapeProblem(item, depth + 1, walk);
      if (problem !== null) return problem;
    }
    return null;
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return 'holds an object that is not plain JSON';
  for (const key of Object.keys(value)) {
    // The key in quotes and its colon.
    walk.boundBytes += 3 + CHARACTER_BOUND_BYTES * key.length;
    const problem = jsonShapeProblem((value as Record<string, unknown>)[key], depth + 1, walk);
    if (problem !== null) return problem;
  }
  return null;
}

/**
 * What makes a live output unreadable to a comparison (preview.ts), in words; null when it is
 * readable. Only the shape is checked, not the size: a record's size is checked apart, and a shadow's
 * live output comes straight from the engine.
 */
export function decisionOutputProblem(entrypoint: DecisionEntrypoint, output: unknown): string | null {
  if (!isRecord(output)) return 'output is not an object';
  if (entrypoint === 'agentgate/execute') {
    if (typeof output.allow !== 'boolean') return 'output.allow is not a boolean';
    if (!Array.isArray(output.violations)) return 'output.violations is not an array';
    if (output.reason !== undefined && typeof output.reason !== 'string') return 'output.reason is not a string';
    return null;
  }
  if (!Array.isArray(output.decisions)) return 'output.decisions is not an array';
  for (const decision of output.decisions as unknown[]) {
    if (!isRecord(decision) || typeof decision.capability !== 'string' || !VERDICTS.has(decision.decision)) {
      return 'output.decisions holds an item without a capability and a grant, approval or deny decision';
    }
    if (decision.reason !== undefined && typeof decision.reason !== 'string') return 'output.decisions holds a reason that is not a string';
  }
  return null;
}

function operatorAnswersProblem(answers: unknown): string | null {
  if (!Array.isArray(answers)) return 'operatorAnswers is not an array';
  if (answers.length > MAX_OPERATOR_ANSWERS) return `operatorAnswers holds more than ${MAX_OPERATOR_ANSWERS} answers`;
  for (const answer of answers as unknown[]) {
    if (!Array.isArray(answer) || answer.length !== 4) return 'operatorAnswers holds an item that is not [name, operand, actual, answer]';
    const [name, , , allowed] = answer as unknown[];
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_OPERATOR_NAME_LENGTH) return 'operatorAnswers holds an operator name that is not a short string';
    if (typeof allowed !== 'boolean') return 'operatorAnswers holds an answer that is not a boolean';
  }
  const problem = jsonValueProblem(answers, MAX_RECORD_PART_BYTES);
  return problem === null ? null : `operatorAnswers ${problem}`;
}

/** What makes a value not a well-formed, bounded DecisionRecord, in words; null when it is one. */
export function decisionRecordProblem(value: unknown): string | null {
  if (!isRecord(value)) return 'a record is not an object';
  if (value.id !== undefined && (typeof value.id !== 'string' || value.id.length === 0 || value.id.length > MAX_ID_LENGTH)) return 'id is not a short string';
  if (typeof value.at !== 'string' || !ISO_8601.test(value.at) || Number.isNaN(Date.parse(value.at))) return 'at is not an ISO 8601 timestamp';
  const entrypoint = value.entrypoint;
  if (entrypoint !== 'agentgate/grants' && entrypoint !== 'agentgate/execute') return 'entrypoint is neither agentgate/grants nor agentgate/execute';
  if (typeof value.sha256 !== 'string' || !SHA256_HEX.test(value.sha256)) return 'sha256 is not 64 lowercase hex digits';
  if (!isRecord(value.input)) return 'input is not an object';
  const inputProblem = jsonValueProblem(value.input, MAX_RECORD_PART_BYTES);
  if (inputProblem !== null) return `input ${inputProblem}`;
  const outputShape = decisionOutputProblem(entrypoint, value.output);
  if (outputShape !== null) return outputShape;
  const outputSize = jsonValueProblem(value.output, MAX_RECORD_PART_BYTES);
  if (outputSize !== null) return `output ${outputSize}`;
  if (value.redactionDependent !== undefined && value.redactionDependent !== true) return 'redactionDependent is not true';
  if (value.operatorAnswers !== undefined) {
    // A grants decision never asks a plugin operator, so answers on one mean the record is not what it says.
    if (entrypoint !== 'agentgate/execute') return 'operatorAnswers belong to execute decisions only';
    const answersProblem = operatorAnswersProblem(value.operatorAnswers);
    if (answersProblem !== null) return answersProblem;
  }
  return null;
}

/**
 * A DecisionRecord read back from a store, or null when the value is malformed or out of bounds
 * (decisionRecordProblem says why). The result is a new object holding only the record's members;
 * their values are the given ones, not copies.
 */
export function parseDecisionRecord(value: unknown): DecisionRecord | null {
  if (decisionRecordProblem(value) !== null) return null;
  const v = value as DecisionRecord;
  const record: DecisionRecord = { at: v.at, entrypoint: v.entrypoint, sha256: v.sha256, input: v.input, output: v.output };
  if (v.id !== undefined) record.id = v.id;
  if (v.operatorAnswers !== undefined) record.operatorAnswers = v.operatorAnswers;
  if (v.redactionDependent === true) record.redactionDependent = true;
  return record;
}

/**
 * A record as a store keeps it, still JSON text: a preview hands these to its worker thread as they
 * are, so that parsing 100,000 records costs the worker's time, not the event loop's.
 */
export interface StoredRecordText {
  id: string;
  json: string;
}

/**
 * The record a store's text holds, its id set; a text that is not a JSON object becomes a record of
 * only its id, which decisionRecordProblem calls malformed rather than letting it vanish.
 */
export function recordFromText(stored: StoredRecordText): DecisionRecord {
  let parsed: unknown;
  try {
    parsed = JSON.parse(stored.json);
  } catch {
    parsed = null;
  }
  return { ...(isRecord(parsed) ? parsed : {}), id: stored.id } as DecisionRecord;
}

/**
 * Thrown by an evaluator of operatorFromAnswers for a call the recorded decision did not make (or
 * made with two different answers, which redaction can cause): the decision cannot be re-run.
 */
export class UnrecordedOperatorCall extends NamedError {}

/**
 * An OperatorEvaluator that answers exactly the recorded calls, matched by name, operand and
 * actual compared as canonical JSON, and throws UnrecordedOperatorCall for any other call. The
 * engine's builtin turns a throw into `false` (a throw inside wasm would corrupt the instance), so a
 * caller that must tell "unanswerable" from "answered false" watches for the throw itself.
 */
export function operatorFromAnswers(answers: ReadonlyArray<OperatorAnswer>): OperatorEvaluator {
  if (answers.length === 0) return refuseEveryCall;
  const known = new Map<string, boolean | 'ambiguous'>();
  // Bounded by the record parser (MAX_OPERATOR_ANSWERS); a caller's own list is its own bound.
  for (const [name, operand, actual, answer] of answers) {
    const key = callKey(name, operand, actual);
    if (key === null) continue;
    const earlier = known.get(key);
    // Two values that differed live may read the same once redacted; neither answer can be trusted then.
    known.set(key, earlier === undefined || earlier === answer ? answer : 'ambiguous');
  }
  return (name, operand, actual) => {
    const key = callKey(name, operand, actual);
    const answer = key === null ? undefined : known.get(key);
    if (typeof answer === 'boolean') return answer;
    throw new UnrecordedOperatorCall(answer === 'ambiguous'
      ? `the recorded decision answered operator ${name} both ways for this operand and value (they differ only in redacted values)`
      : `the recorded decision did not call operator ${name} with this operand and value`);
  };
}

const refuseEveryCall: OperatorEvaluator = (name) => {
  throw new UnrecordedOperatorCall(`the recorded decision did not call operator ${name} (it recorded no operator answers)`);
};

function callKey(name: string, operand: unknown, actual: unknown): string | null {
  const operandJson = canonicalJson(operand);
  const actualJson = canonicalJson(actual);
  if (operandJson === null || actualJson === null) return null;
  return `${JSON.stringify(name)},${operandJson},${actualJson}`;
}
