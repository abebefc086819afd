// The Lua scripts behind every read-then-write transition (DESIGN §3). Each script touches the keys
// of ONE hash slot only (an agent's keys, or a host's keys, or a single key), so the same scripts run
// on a single Redis and on Redis Cluster. ioredis sends them with EVALSHA and falls back to EVAL on
// NOSCRIPT. Values written by TypeScript (numbers as decimal strings, JSON) are stored as given;
// the scripts only compare numbers, they never format them.

import { AUDIT_APPEND, AUDIT_FORGET_CONSUMERS, AUDIT_HOLD } from './audit-scripts.ts';

/** A script as ioredis `defineCommand` takes it. */
export interface ScriptDefinition {
  numberOfKeys: number;
  lua: string;
}

// Helpers for the grant index (capability -> JSON array of grant ids), shared by the scripts that
// write grants. cjson encodes an empty table as `{}`, so an emptied list is deleted, never stored.
const GRANT_INDEX_HELPERS = `
local function indexAdd(capKey, capability, id)
  local raw = redis.call('HGET', capKey, capability)
  local ids = {}
  if raw then ids = cjson.decode(raw) end
  for _, existing in ipairs(ids) do
    if existing == id then return end
  end
  ids[#ids + 1] = id
  redis.call('HSET', capKey, capability, cjson.encode(ids))
end

local function indexRemove(capKey, capability, id)
  local raw = redis.call('HGET', capKey, capability)
  if not raw then return end
  local kept = {}
  for _, existing in ipairs(cjson.decode(raw)) do
    if existing ~= id then kept[#kept + 1] = existing end
  end
  if #kept == 0 then
    redis.call('HDEL', capKey, capability)
  else
    redis.call('HSET', capKey, capability, cjson.encode(kept))
  end
end

-- Inserts or overwrites one grant; when an overwrite changes its capability, the id moves between
-- index lists so the index never names a grant under a capability it no longer has.
local function putGrant(grantsKey, capKey, id, capability, json)
  local previous = redis.call('HGET', grantsKey, id)
  if previous then
    local before = cjson.decode(previous).capability
    if before ~= capability then indexRemove(capKey, before, id) end
  end
  redis.call('HSET', grantsKey, id, json)
  indexAdd(capKey, capability, id)
end
`;

/**
 * Reads one agent atomically: hash, grants and session in one go, so a reader never sees half of a
 * concurrent transition. KEYS: agent, session, grants. Returns false when the agent does not exist.
 */
const GET_AGENT: ScriptDefinition = {
  numberOfKeys: 3,
  lua: `
local agent = redis.call('HGETALL', KEYS[1])
if #agent == 0 then return false end
return {agent, redis.call('HVALS', KEYS[3]), redis.call('GET', KEYS[2])}
`,
};

/**
 * Writes a new agent's hash, grants and session (the agent-slot half of createAgent).
 * KEYS: agent, session, grants, grants-by-capability.
 * ARGV[1]: JSON {fields: [f, v, ...], grants: [[id, capability, json], ...], session?: "ms"}.
 * Returns 0 when the agent id already exists (nothing written), else 1.
 */
const CREATE_AGENT: ScriptDefinition = {
  numberOfKeys: 4,
  lua: `${GRANT_INDEX_HELPERS}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local payload = cjson.decode(ARGV[1])
-- Leftovers of an agent id that lost a race and was half cleaned up must not leak into this one.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], unpack(payload.fields))
for _, grant in ipairs(payload.grants) do putGrant(KEYS[3], KEYS[4], grant[1], grant[2], grant[3]) end
if payload.session then redis.call('SET', KEYS[2], payload.session, 'PXAT', payload.session) end
return 1
`,
};

/**
 * Admits a new agent to its host (the host-slot half of createAgent): claims the (host, agent key)
 * registration index and adds the agent to the host's set, in one step with the checks that must
 * hold at that moment. KEYS: index, host agent set, host hash, host pending set.
 * ARGV: agent id, check ('1' = check the host, '0' = claim only), expected host status, expected
 * host thumbprint, max agents, pending deadline ms ('' = not pending), now ms, max pending agents,
 * expected host user id ('' = not linked).
 * Returns {'ok'} | {'exists', owner id} | {'host_changed'} | {'too_many_agents'} | {'too_many_pending'};
 * every refusal writes nothing.
 */
const ADMIT_AGENT: ScriptDefinition = {
  numberOfKeys: 4,
  lua: `
local owner = redis.call('GET', KEYS[1])
if owner then return {'exists', owner} end
if ARGV[2] == '1' then
  local host = redis.call('HMGET', KEYS[3], 'status', 'thumbprint', 'userId')
  if host[1] ~= ARGV[3] or host[2] ~= ARGV[4] or (host[3] or '') ~= ARGV[9] then return {'host_changed'} end
  if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[5]) then return {'too_many_agents'} end
  if ARGV[6] ~= '' then
    -- Agents whose approval lapsed no longer hold a pending slot.
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[7])
    if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[8]) then return {'too_many_pending'} end
    redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
return {'ok'}
`,
};

/**
 * Compare-and-set on an agent. KEYS: agent, session, grants, grants-by-capability.
 * ARGV: expected version, next version, JSON {set: [f, v, ...], unset: [f, ...], replace: bool,
 * grants: [[id, capability, json], ...], session?: "ms"}.
 * Returns {'not_found'} | {'conflict'|'ok', agentFields, grantJsons, session|false}.
 */
const CAS_AGENT: ScriptDefinition = {
  numberOfKeys: 4,
  lua: `${GRANT_INDEX_HELPERS}
local function snapshot(outcome)
  return {outcome, redis.call('HGETALL', KEYS[1]), redis.call('HVALS', KEYS[3]), redis.call('GET', KEYS[2])}
end
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return {'not_found'} end
if tonumber(current) ~= tonumber(ARGV[1]) then return snapshot('conflict') end
local change = cjson.decode(ARGV[3])
if #change.set > 0 then redis.call('HSET', KEYS[1], unpack(change.set)) end
if #change.unset > 0 then redis.call('HDEL', KEYS[1], unpack(change.unset)) end
redis.call('HSET', KEYS[1], 'version', ARGV[2])
if change.replace then redis.call('DEL', KEYS[3], KEYS[4]) end
for _, grant in ipairs(change.grants) do putGrant(KEYS[3], KEYS[4], grant[1], grant[2], grant[3]) end
if change.session then redis.call('SET', KEYS[2], change.session, 'PXAT', change.session) end
return snapshot('ok')
`,
};

/** How many keys the execute script takes (see EXECUTE_ROUND_TRIP). */
const EXECUTE_KEY_COUNT = 9;

/**
 * One spend of a windowed counter, exactly as rate-limiter-flexible's RateLimiterRedis keeps its
 * counts (its incr-ttl script), so that its own spends of the same budgets (the endpoints other
 * than execute) and these count together: the first spend opens the window with the key's expiry.
 * Returns the count in the window and the milliseconds left of it.
 */
const COUNTER_HELPERS = `
local function spendCounter(key, points, windowSeconds)
  redis.call('SET', key, 0, 'EX', windowSeconds, 'NX')
  local consumed = redis.call('INCRBY', key, points)
  local ttl = redis.call('PTTL', key)
  if ttl == -1 then
    redis.call('EXPIRE', key, windowSeconds)
    ttl = 1000 * windowSeconds
  end
  return consumed, ttl
end
`;

/**
 * The hot path's one command (DESIGN §2 step 4). KEYS, always nine (ioredis sends a call to the
 * node of its first argument, so the number of keys cannot come first): agent, session, grants,
 * grants-by-capability, jti, two counters, the audit stream, the decision stream; a counter or
 * stream the call does not use is given as the agent's key, which is in the right slot and which
 * that part never touches.
 * ARGV: key version, jti ttl ms, now ms, next session deadline, counter count c, event count e,
 * the audit stream's max length, its entry's field name, record count d, the decision stream's max
 * length, its entry's field name (eleven in all), then c pairs (points, window seconds), then e
 * event JSONs, then d decision record JSONs, then the capability names whose grants come back (one
 * for execute, up to one per item for batch execute).
 * Order: the events and then the decision records are appended first, whatever the outcome (they
 * are earlier calls' records, each XADD pcall'ed so one refused append stops nothing); then
 * not_found, stale_key (which spend nothing: the retry spends), the counters, replay (writes
 * nothing more), then the jti is recorded and, only for a usable agent, the session is extended and
 * lastUsedAtMs touched.
 * Returns {outcome, event written flags, record written flags, counts as consumed/ms pairs, then
 * for 'ok': agentFields as read, session deadline as read or false, grant jsons}.
 */
const EXECUTE_ROUND_TRIP: ScriptDefinition = {
  numberOfKeys: EXECUTE_KEY_COUNT,
  lua: `${COUNTER_HELPERS}
local counterCount = tonumber(ARGV[5])
local eventCount = tonumber(ARGV[6])
local recordCount = tonumber(ARGV[9])
local function append(stream, maxLength, field, first, count)
  local written = {}
  for i = 1, count do
    local result = redis.pcall('XADD', stream, 'MAXLEN', '~', maxLength, '*', field, ARGV[first + i])
    if type(result) == 'table' and result.err then written[i] = 0 else written[i] = 1 end
  end
  return written
end
local written = append(KEYS[8], ARGV[7], ARGV[8], 11 + 2 * counterCount, eventCount)
local decided = append(KEYS[9], ARGV[10], ARGV[11], 11 + 2 * counterCount + eventCount, recordCount)

local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then return {'not_found', written, decided} end
local agent = {}
for i = 1, #flat, 2 do agent[flat[i]] = flat[i + 1] end
if tonumber(agent.keyVersion) ~= tonumber(ARGV[1]) then return {'stale_key', written, decided} end

local counts = {}
for i = 1, counterCount do
  local consumed, ttl = spendCounter(KEYS[5 + i], ARGV[10 + 2 * i], ARGV[11 + 2 * i])
  counts[#counts + 1] = consumed
  counts[#counts + 1] = ttl
end
if not redis.call('SET', KEYS[5], '1', 'PX', ARGV[2], 'NX') then return {'replay', written, decided, counts} end

local now = tonumber(ARGV[3])
local session = redis.call('GET', KEYS[2])
local usable = agent.status == 'active' and agent.hostStatus == 'active'
  and session ~= false and tonumber(session) > now
  and tonumber(agent.maxLifetimeExpiresAtMs) > now
  and tonumber(agent.absoluteExpiresAtMs) > now
if usable then
  redis.call('SET', KEYS[2], ARGV[4], 'PXAT', ARGV[4])
  redis.call('HSET', KEYS[1], 'lastUsedAtMs', ARGV[3])
end

-- A name given twice is asked once, so no grant comes back twice.
local names, seen = {}, {}
for i = 12 + 2 * counterCount + eventCount + recordCount, #ARGV do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    names[#names + 1] = ARGV[i]
  end
end
local grants = {}
if #names > 0 then
  local ids = {}
  for _, indexed in ipairs(redis.call('HMGET', KEYS[4], unpack(names))) do
    if indexed then
      for _, id in ipairs(cjson.decode(indexed)) do ids[#ids + 1] = id end
    end
  end
  if #ids > 0 then
    for _, json in ipairs(redis.call('HMGET', KEYS[3], unpack(ids))) do
      if json then grants[#grants + 1] = json end
    end
  end
end
return {'ok', written, decided, counts, flat, session, grants}
`,
};

/**
 * A counter the round trip could not spend in its own script: on a Redis Cluster, one in another
 * slot than the agent's (the host's budget). KEYS: the counter. ARGV: points, window seconds.
 * Returns {consumed, ms left}.
 */
const SPEND_COUNTER: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${COUNTER_HELPERS}
local consumed, ttl = spendCounter(KEYS[1], ARGV[1], ARGV[2])
return {consumed, ttl}
`,
};

/**
 * Gives back what SPEND_COUNTER spent, when the round trip it went beside found an unknown agent
 * or a stale key (which spend nothing). A window that ended meanwhile is left alone: there is
 * nothing left to give back to. KEYS: the counter. ARGV: points.
 */
const GIVE_BACK_COUNTER: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECRBY', KEYS[1], ARGV[1]) end
return 1
`,
};

/**
 * Claims a registration index for an agent. KEYS: index. ARGV: agent id.
 * Returns 'claimed' (written now), 'ours' (already this agent's) or 'taken' (another agent's).
 */
const CLAIM_INDEX: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local owner = redis.call('GET', KEYS[1])
if not owner then
  redis.call('SET', KEYS[1], ARGV[1])
  return 'claimed'
end
if owner == ARGV[1] then return 'ours' end
return 'taken'
`,
};

/** Writes a hash only if the key does not exist. KEYS: hash. ARGV: f, v, ... Returns 1 if written. */
const CREATE_HASH: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`,
};

/**
 * Sets and removes fields of an existing host. KEYS: host. ARGV: allowed current statuses,
 * comma-separated ('' = any), the number n of fields to remove, those n fields, then field, value,
 * ... Returns false when the host does not exist, {'ok', fields} when written, {'refused', fields}
 * when its status is not one of the allowed ones (nothing written).
 */
const UPDATE_HOST: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if ARGV[1] ~= '' then
  local allowed = false
  for s in string.gmatch(ARGV[1], '[^,]+') do
    if s == status then allowed = true end
  end
  if not allowed then return {'refused', redis.call('HGETALL', KEYS[1])} end
end
local unset = tonumber(ARGV[2])
if unset > 0 then redis.call('HDEL', KEYS[1], unpack(ARGV, 3, 2 + unset)) end
if #ARGV > 2 + unset then redis.call('HSET', KEYS[1], unpack(ARGV, 3 + unset)) end
return {'ok', redis.call('HGETALL', KEYS[1])}
`,
};

/**
 * The host-hash step of rotateHostKey: swaps the key only if the thumbprint is still the expected
 * one. KEYS: host. ARGV: expected thumbprint, next thumbprint, next JWK json, updatedAtMs.
 * Returns {'ok'} | {'not_found'} | {'conflict', current thumbprint}.
 */
const ROTATE_HOST_KEY: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local current = redis.call('HGET', KEYS[1], 'thumbprint')
if not current then return {'not_found'} end
if current ~= ARGV[1] then return {'conflict', current} end
redis.call('HSET', KEYS[1], 'thumbprint', ARGV[2], 'publicJwk', ARGV[3], 'updatedAtMs', ARGV[4])
return {'ok'}
`,
};

/** Deletes a string key only while it still holds the given value. KEYS: key. ARGV: value. */
const DELETE_IF_VALUE: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
};

/**
 * The agent-slot half of removing an agent that waited too long. KEYS: agent, session, grants,
 * grants-by-capability. ARGV: created-before ms. Deletes them only if the agent is still pending
 * and old enough; returns {hostId, keyThumbprint} when it deleted, false otherwise (one winner).
 */
const REMOVE_STALE_PENDING_AGENT: ScriptDefinition = {
  numberOfKeys: 4,
  lua: `
local agent = redis.call('HMGET', KEYS[1], 'status', 'createdAtMs', 'hostId', 'keyThumbprint')
if agent[1] ~= 'pending' or not agent[2] or tonumber(agent[2]) >= tonumber(ARGV[1]) then return false end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return {agent[3], agent[4]}
`,
};

/**
 * The host-slot half: forgets a removed agent. KEYS: host agent set, host pending set, the
 * agent's (host, key) index. ARGV: agent id.
 */
const FORGET_REMOVED_AGENT: ScriptDefinition = {
  numberOfKeys: 3,
  lua: `
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return 1
`,
};

/**
 * Removes a host that waited too long, only if still pending, old enough and without agents.
 * KEYS: host, host agent set, host pending set. ARGV: created-before ms. Returns {thumbprint,
 * JWKS URL or ''} when it deleted (the caller releases their indexes), false otherwise.
 */
const REMOVE_STALE_PENDING_HOST: ScriptDefinition = {
  numberOfKeys: 3,
  lua: `
local host = redis.call('HMGET', KEYS[1], 'status', 'createdAtMs', 'thumbprint', 'jwksUrl')
if host[1] ~= 'pending' or not host[2] or tonumber(host[2]) >= tonumber(ARGV[1]) then return false end
if redis.call('SCARD', KEYS[2]) > 0 then return false end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {host[3], host[4] or ''}
`,
};

/**
 * Adds a passkey to a person's hash of passkeys unless its credential id is there already or the
 * person holds the most passkeys they may (DESIGN §8: two ceremonies at once cannot both pass one
 * count). KEYS: passkeys hash. ARGV: credential id, JSON, most passkeys.
 */
const ADD_PASSKEY: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 'exists' end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 'full' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 'added'
`,
};

/**
 * Rewrites a passkey (its counter and last use) only while it exists, so a use racing a removal
 * never brings the removed passkey back. KEYS: passkeys hash. ARGV: credential id, JSON.
 */
const UPDATE_PASSKEY: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`,
};

/**
 * Puts an agent in a person's inbox (a sorted set scored by deadline): a later deadline wins, the
 * entries nearest to lapsing go beyond the bound, and the set lives until its latest deadline.
 * KEYS: inbox. ARGV: agent id, deadline (epoch ms), most entries kept.
 */
const ADD_TO_INBOX: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not current or tonumber(current) < tonumber(ARGV[2]) then redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) end
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if excess > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1) end
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if latest[2] then redis.call('PEXPIREAT', KEYS[1], latest[2]) end
return 1
`,
};

/**
 * Stores a new host enrollment unless one is stored under the same token hash, with its expiry, in
 * one step. KEYS: the enrollment hash. ARGV: milliseconds to keep it, then field, value, ...
 */
const CREATE_ENROLLMENT: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`,
};

/**
 * Binds a host enrollment to the host its token made: only while it is pending, so of two enrolls
 * with one token exactly one wins. HSET keeps the key's expiry. KEYS: the enrollment hash.
 * ARGV: host id, when (epoch ms).
 */
const COMPLETE_ENROLLMENT: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'not_found' end
if state ~= 'pending' then return 'not_pending' end
redis.call('HSET', KEYS[1], 'state', 'enrolled', 'hostId', ARGV[1], 'enrolledAtMs', ARGV[2])
return 'enrolled'
`,
};

/** Every script, by the command name ioredis registers it under. */
export const SCRIPTS = {
  agentgateGetAgent: GET_AGENT,
  agentgateCreateAgent: CREATE_AGENT,
  agentgateAdmitAgent: ADMIT_AGENT,
  agentgateRemoveStalePendingAgent: REMOVE_STALE_PENDING_AGENT,
  agentgateForgetRemovedAgent: FORGET_REMOVED_AGENT,
  agentgateRemoveStalePendingHost: REMOVE_STALE_PENDING_HOST,
  agentgateCasAgent: CAS_AGENT,
  agentgateExecute: EXECUTE_ROUND_TRIP,
  agentgateSpendCounter: SPEND_COUNTER,
  agentgateGiveBackCounter: GIVE_BACK_COUNTER,
  agentgateClaimIndex: CLAIM_INDEX,
  agentgateCreateHash: CREATE_HASH,
  agentgateUpdateHost: UPDATE_HOST,
  agentgateRotateHostKey: ROTATE_HOST_KEY,
  agentgateDeleteIfValue: DELETE_IF_VALUE,
  agentgateAuditAppend: AUDIT_APPEND,
  agentgateAuditHold: AUDIT_HOLD,
  agentgateAuditForgetConsumers: AUDIT_FORGET_CONSUMERS,
  agentgateAddPasskey: ADD_PASSKEY,
  agentgateUpdatePasskey: UPDATE_PASSKEY,
  agentgateAddToInbox: ADD_TO_INBOX,
  agentgateCreateEnrollment: CREATE_ENROLLMENT,
  agentgateCompleteEnrollment: COMPLETE_ENROLLMENT,
} as const satisfies Record<string, ScriptDefinition>;

export type ScriptName = keyof typeof SCRIPTS;
