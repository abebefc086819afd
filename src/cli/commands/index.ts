// Every command, in the order help lists them: local first, then the admin API, then acting as a
// host or an agent.
import type { CommandSpec } from '../command.ts';
import { agentsCommands } from './agents.ts';
import { approvalsCommands } from './approvals.ts';
import { auditCommands } from './audit.ts';
import { executeCommand } from './execute.ts';
import { hostsCommands } from './hosts.ts';
import { keygenCommand } from './keygen.ts';
import { operatorsCommands } from './operators.ts';
import { policyCommands } from './policy.ts';
import { registerCommand } from './register.ts';
import { requestCommand } from './request.ts';

export const COMMANDS: readonly CommandSpec[] = [
  keygenCommand,
  ...hostsCommands,
  ...agentsCommands,
  ...approvalsCommands,
  ...policyCommands,
  ...operatorsCommands,
  ...auditCommands,
  registerCommand,
  executeCommand,
  requestCommand,
];
