// Opaque identifiers (user codes are derived from approval ids: services/approvals/user-codes.ts). 128 bits of randomness make ids unguessable.
import { randomBytes } from 'node:crypto';

const newId = (prefix: string) => `${prefix}_${randomBytes(16).toString('base64url')}`;

export const newAgentId = () => newId('agt');
export const newHostId = () => newId('hst');
export const newGrantId = () => newId('grt');
export const newApprovalId = () => newId('apr');
