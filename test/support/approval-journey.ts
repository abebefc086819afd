// A person deciding in a real browser while an agent's host polls: the steps the browser approval
// tests share (browser.approval.test.ts for a device code, browser.ciba.test.ts for a CIBA request).
// Each navigation is checked as every page must be (expectSoundStep: the CSP on every agentgate
// response on the way, no inline script, no console error) and photographed; the host polls
// GET /agent/status at the approval's interval, never faster, bounded by a deadline.
import type { Response } from 'playwright-core';
import { expect } from 'vitest';
import { expectSoundStep, type NavigatingPerson } from './browser.ts';
import type { Client, HttpResult, TestAgent } from './client.ts';

/** What the host's poll saw: every answer, and the first one that was no longer pending. */
export interface PollOutcome {
  answers: HttpResult[];
  decided: HttpResult;
}

export interface ApprovalJourney {
  /**
   * Runs a person's action that navigates (opening a URL, clicking a link or a button), waits for
   * the page it ends on, checks it (expectSoundStep), takes the screenshot and answers the final
   * document response.
   */
  navigate(name: string, action: () => Promise<unknown>): Promise<Response>;
  /** `status path` of agentgate's navigations in the last step (not the provider's), for checking where redirects led. */
  ourSteps(): string[];
  /** Runs the person's part while the host polls; the poll is always stopped and awaited. */
  whilePolling(agent: TestAgent, intervalSeconds: number, personActs: () => Promise<void>): Promise<PollOutcome>;
}

/**
 * The steps for `person` against the agentgate at `baseUrl()`, whose host `client` polls. The base
 * URL is read when a step runs, so the journey can be made before the server has started.
 */
export function approvalJourney(person: NavigatingPerson, baseUrl: () => string, client: Client, pollDeadlineMs: number): ApprovalJourney {
  const ourNavigations = (): Response[] => person.navigations.filter((response) => new URL(response.url()).origin === new URL(baseUrl()).origin);

  /**
   * Polls GET /agent/status as an agent's host does (RFC 8628 §3.5): once at once, then every
   * `interval` seconds, never faster, until the agent is no longer pending. Bounded by a deadline
   * and stopped by `stop`, so a failing browser step never leaves it running.
   */
  const pollUntilDecided = async (agent: TestAgent, intervalSeconds: number, stop: AbortSignal): Promise<PollOutcome> => {
    const answers: HttpResult[] = [];
    const deadline = Date.now() + pollDeadlineMs;
    while (Date.now() < deadline && !stop.aborted) {
      const answer = await client.status(agent.host, agent.id);
      answers.push(answer);
      if (answer.status !== 200 || answer.json?.status !== 'pending') return { answers, decided: answer };
      await new Promise((resolve) => setTimeout(resolve, intervalSeconds * 1000));
    }
    throw new Error(`the agent was still pending after ${answers.length} polls`);
  };

  return {
    async navigate(name, action) {
      person.navigations.length = 0;
      const landed = person.page.waitForResponse(
        (response) => response.request().isNavigationRequest() && response.frame() === person.page.mainFrame() && (response.status() < 300 || response.status() >= 400),
      );
      const [final] = await Promise.all([landed, action()]);
      await person.page.waitForLoadState('load');
      await expectSoundStep(person, name, ourNavigations());
      return final;
    },
    ourSteps: () => ourNavigations().map((response) => `${response.status()} ${new URL(response.url()).pathname}`),
    async whilePolling(agent, intervalSeconds, personActs) {
      const stop = new AbortController();
      const polling = pollUntilDecided(agent, intervalSeconds, stop.signal);
      try {
        await personActs();
        return await polling;
      } finally {
        stop.abort();
        await polling.catch(() => undefined);
      }
    },
  };
}

/**
 * The host polled while the person decided (at least once before the decision), and, polling at the
 * interval, never heard slow_down: every answer before the deciding one was a plain pending.
 */
export function expectPolledPolitely(outcome: PollOutcome): void {
  const waiting = outcome.answers.slice(0, -1).map((answer) => `${answer.status} ${answer.json?.status ?? answer.json?.error}`);
  expect(waiting.length).toBeGreaterThan(0);
  expect(waiting).toEqual(waiting.map(() => '200 pending'));
}

/** An agent view's grants as {capability: status}. */
export const grantsOf = (status: HttpResult): Record<string, string> =>
  Object.fromEntries((status.json.agent_capability_grants as Array<{ capability: string; status: string }>).map((g) => [g.capability, g.status]));
