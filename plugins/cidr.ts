// `cidr`: an IP address argument lies inside one of the listed networks (IPv4 or IPv6).
// Constraint: {"target_ip": {"cidr": ["10.0.0.0/8", "2001:db8::/32"]}}
import { BlockList, isIP } from 'node:net';
import { z } from 'zod';

const MAX_CACHED_OPERANDS = 1000;

/** Parses "address/prefix" into a BlockList entry; throws when it is not a network. */
function addNetwork(list: BlockList, network: string): void {
  const [address, bits, extra] = network.split('/');
  const family = isIP(address ?? '');
  const prefix = Number(bits);
  const maxBits = family === 4 ? 32 : 128;
  if (extra !== undefined || family === 0 || !/^\d{1,3}$/.test(bits ?? '') || prefix > maxBits) {
    throw new Error(`not a CIDR network: ${network}`);
  }
  list.addSubnet(address!, prefix, family === 4 ? 'ipv4' : 'ipv6');
}

export const name = 'cidr';
export const description = 'the argument is an IP address inside one of the listed CIDR networks';
export const operand = z
  .array(z.string().max(64))
  .min(1)
  .max(100)
  .refine((networks) => {
    try {
      networks.forEach((n) => addNetwork(new BlockList(), n));
      return true;
    } catch {
      return false;
    }
  }, 'every entry must be a CIDR network such as 10.0.0.0/8 or 2001:db8::/32');

// Building a BlockList per call would dominate the cost, so lists are cached per operand.
const cache = new Map<string, BlockList>();

function listFor(networks: string[]): BlockList {
  const key = networks.join(',');
  let list = cache.get(key);
  if (!list) {
    list = new BlockList();
    for (const network of networks) addNetwork(list, network);
    if (cache.size >= MAX_CACHED_OPERANDS) cache.delete(cache.keys().next().value!);
    cache.set(key, list);
  }
  return list;
}

export function evaluate(networks: string[], actual: unknown): boolean {
  if (typeof actual !== 'string') return false;
  const family = isIP(actual);
  if (family === 0) return false;
  return listFor(networks).check(actual, family === 4 ? 'ipv4' : 'ipv6');
}
