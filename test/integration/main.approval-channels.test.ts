// The CIBA notification channels as an operator meets them (src/main.ts): each is named in the
// start-up line, with the approval methods discovery then offers, and the start-up line and log never
// carry the SMTP password or the webhook secret.
import { afterAll, describe, expect, it } from 'vitest';
import { startAgentgate, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { http } from '../support/client.ts';

describe('the start-up line names the CIBA channels', () => {
  const servers: Agentgate[] = [];
  afterAll(async () => {
    await Promise.all(servers.splice(0).map((server) => server.stop()));
  });
  const start = async (env: Record<string, string>) => {
    const server = await startAgentgate({ env });
    servers.push(server);
    return server;
  };

  it('with a webhook and an SMTP server: both channels, CIBA offered in discovery, and neither secret in the output', async () => {
    const webhookSecret = 'webhook-secret-0123456789abcdefghijkl';
    const smtpPassword = 'smtp-password-9876543210';
    const server = await start({
      APPROVAL_WEBHOOK_URL: 'http://127.0.0.1:9/agentgate', APPROVAL_WEBHOOK_SECRET: webhookSecret,
      SMTP_URL: `smtp://agentgate:${smtpPassword}@127.0.0.1:9`, SMTP_FROM: 'Agentgate <approvals@example.test>',
    });
    expect(server.startup.notifications).toEqual(['webhook', 'email']);
    expect(server.startup.approvalMethods).toEqual(['device_authorization', 'ciba']);
    expect((await http('GET', `${server.base}/.well-known/agent-configuration`)).json.approval_methods).toEqual(['device_authorization', 'ciba']);
    const output = server.output();
    expect(output).toContain("agentgate listening");
    expect(output).not.toContain(webhookSecret);
    expect(output).not.toContain(smtpPassword);
  }, WITH_SERVERS_TIMEOUT_MS);

  it('with none: device authorization only, and the line says how to turn CIBA on', async () => {
    const server = await start({});
    expect(server.startup.notifications).toMatch(/^none \(APPROVAL_WEBHOOK_URL or SMTP_URL/);
    expect(server.startup.approvalMethods).toEqual(['device_authorization']);
    expect((await http('GET', `${server.base}/.well-known/agent-configuration`)).json.approval_methods).toEqual(['device_authorization']);
  }, WITH_SERVERS_TIMEOUT_MS);
});
