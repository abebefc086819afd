// The Lua scripts of the audit trail's stream (audit/log.ts, audit-records.ts); the decision stream
// shares the append (decision-records.ts). Each touches one stream key, so on a Redis Cluster each
// runs in that key's slot.
import type { ScriptDefinition } from './scripts.ts';

/**
 * Appends several events in one command: an XADD each, in order, with the same approximate
 * MAXLEN, then, when a minimum id is given, one exact XTRIM MINID that drops the events appended
 * before it (Redis refuses MAXLEN and MINID in one XADD). A flush of N events would otherwise cost
 * N commands' encoding, promises and replies in the client and N dispatches in Redis (a batch of
 * ten calls writes ten events). Each command is pcall'ed, so one refused append does not stop the
 * others, and the answer says which were written. The trim is exact so that age means age, and
 * costs little: every entry is removed once, and a trim with nothing older stops at the first
 * entry. KEYS: stream. ARGV: max length, minimum id (`<ms>`, or empty for none), the entry's field
 * name, then one event JSON each. Returns 1 or 0 per event. Nothing in it is the audit trail's
 * own, so the decision stream appends several records through it too (decision-records.ts), with
 * no minimum id.
 */
export const AUDIT_APPEND: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local written = {}
for i = 4, #ARGV do
  local result = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', ARGV[3], ARGV[i])
  if type(result) == 'table' and result.err then written[#written + 1] = 0 else written[#written + 1] = 1 end
end
if ARGV[2] ~= '' then redis.pcall('XTRIM', KEYS[1], 'MINID', ARGV[2]) end
return written
`,
};

/**
 * Renews or gives back a forwarder's hold on audit events, but only on those it still holds (one
 * taken over by another forwarder stays theirs). KEYS: audit stream. ARGV: group, consumer, idle ms
 * to set (0 renews; a large value gives back, as any forwarder may take over an event idle that
 * long), then ids. Returns the ids it applied to. XPENDING is asked per id (a batch is at most
 * MAX_AUDIT_READ ids), and a stream or group that does not exist yet holds nothing.
 */
export const AUDIT_HOLD: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local mine = {}
for i = 4, #ARGV do
  local entry = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if type(entry) == 'table' and entry.err then return {} end
  if entry[1] and entry[1][2] == ARGV[2] then mine[#mine + 1] = ARGV[i] end
end
if #mine == 0 then return mine end
local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], '0'}
for _, id in ipairs(mine) do args[#args + 1] = id end
args[#args + 1] = 'IDLE'
args[#args + 1] = ARGV[3]
args[#args + 1] = 'JUSTID'
redis.call(unpack(args))
return mine
`,
};

/**
 * Removes forwarders of the audit group that hold nothing and have not been seen for a while (an
 * instance that restarted comes back under a new name), so the group's consumer list stays small.
 * Checked and removed in one step, so a forwarder cannot take an event between the two. KEYS:
 * audit stream. ARGV: group, idle ms, most to remove. Returns how many it removed.
 */
export const AUDIT_FORGET_CONSUMERS: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if type(consumers) == 'table' and consumers.err then return 0 end
local removed = 0
for _, consumer in ipairs(consumers) do
  if removed >= tonumber(ARGV[3]) then break end
  local info = {}
  for i = 1, #consumer, 2 do info[consumer[i]] = consumer[i + 1] end
  if tonumber(info['pending']) == 0 and tonumber(info['idle']) > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed = removed + 1
  end
end
return removed
`,
};

