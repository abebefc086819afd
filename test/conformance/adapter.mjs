// agentgate's adapter for the shared black-box conformance suite (../shared/conformance). It does
// the set-up the protocol leaves to implementations through agentgate's admin API. Run with
// AG_ADAPTER=$PWD/test/conformance/adapter.mjs (see README.md, "Conformance").
import { NotAvailable } from '../../../shared/conformance/lib/adapter-api.mjs';

/** Capability roles in the shipped catalog (config/capabilities.json). */
const ROLES = {
  echo: 'echo',
  constrained: 'transfer_money',
  // Executes like echo with any arguments: weather_lookup's schema is closed (it takes only city).
  other: 'search_documents',
  failing: 'flaky_backend',
  blocked: 'purge_all_data',
  removable: 'legacy_report',
};

export default async function createAdapter({ config, request }) {
  const token = config.adminToken;
  const admin = async (method, path, json) => {
    if (!token) throw new NotAvailable('AG_ADMIN_TOKEN is not set');
    const res = await request(method, `${config.baseUrl}${path}`, { bearer: token, ...(json === undefined ? {} : { json }) });
    if (res.status >= 300) throw new Error(`admin ${method} ${path} failed: ${res.status} ${res.text}`);
    return res.json;
  };
  return {
    capabilities: async () => ({ ...ROLES }),
    createLinkedHost: async ({ publicJwk, name, defaultCapabilities }) => {
      // A capability that needs a person's passkey (transfer_money, the `constrained` role) is never
      // a host default here (docs/stances.md): the suite then takes its other way, an autonomous
      // registration that approvePending approves through the admin API.
      if (!token) throw new NotAvailable('AG_ADMIN_TOKEN is not set');
      const res = await request('POST', `${config.baseUrl}/admin/hosts`, {
        bearer: token, json: { public_key: publicJwk, name, default_capabilities: defaultCapabilities, user_id: 'conformance-user' },
      });
      if (res.status === 400 && res.json?.error === 'invalid_capabilities' && /passkey/.test(res.json?.message ?? '')) {
        throw new NotAvailable(`agentgate never makes a capability that needs presence a default (${res.json.invalid_capabilities.join(', ')})`);
      }
      if (res.status >= 300) throw new Error(`admin POST /admin/hosts failed: ${res.status} ${res.text}`);
      return { hostId: res.json.host_id };
    },
    approvePending: async (agentId, { capabilities } = {}) => {
      await admin('POST', `/admin/agents/${encodeURIComponent(agentId)}/approve`, { ...(capabilities ? { capabilities } : {}), user_id: 'conformance-user' });
    },
    denyPending: async (agentId) => {
      await admin('POST', `/admin/agents/${encodeURIComponent(agentId)}/deny`, { user_id: 'conformance-user' });
    },
    expireAgent: async (agentId) => {
      await admin('POST', `/admin/agents/${encodeURIComponent(agentId)}/expire`);
    },
    exceedAbsoluteLifetime: async (agentId) => {
      await admin('POST', `/admin/agents/${encodeURIComponent(agentId)}/exceed-absolute-lifetime`);
    },
    removeCapability: async (name) => {
      await admin('POST', `/admin/capabilities/${encodeURIComponent(name)}/remove`);
    },
    restoreCapability: async (name) => {
      await admin('POST', `/admin/capabilities/${encodeURIComponent(name)}/restore`);
    },
    introspectHeaders: async () => {
      if (!token) throw new NotAvailable('AG_ADMIN_TOKEN is not set');
      return { authorization: `Bearer ${token}` };
    },
  };
}
