// Waiting for replicas before a withdrawal of authority is acknowledged (DESIGN §10). Redis
// replicates asynchronously: a write a master acknowledged and then lost in a failover, before its
// replica had it, is undone by the promotion. For a revocation that would bring back an agent its
// host was told was gone, so revocations, key rotations, denials and unlinks wait for WAIT.
//
// Why a connection of its own, and why a marker write. WAIT blocks the connection that sends it
// until the replicas acknowledge or the timeout passes; on the command connection it would hold up
// every execute pipelined behind it. And WAIT counts the replicas that have this connection's own
// last write: a connection that wrote nothing waits for nothing. So a round writes a marker key on
// this connection, in the slot of the record that was withdrawn, after that record's write was
// acknowledged, and then sends WAIT. The master's replication stream is one ordered log, so a
// replica that has the marker has every write the master took before it, the withdrawal included.
//
// Rounds are shared (group commit): one round per master runs at a time, and every withdrawal
// that asks while it runs joins the next one, whose marker follows all of their writes. A replica
// that stopped acknowledging therefore delays withdrawals by at most two wait timeouts, not by one
// timeout per withdrawal queued behind it.
import calculateSlot from 'cluster-key-slot';
import { Cluster, type Redis } from 'ioredis';
import { within } from '../../common/deadline.ts';
import type { Durability } from '../store.ts';
import type { RedisConnection } from './connection.ts';

/** How long a marker key lives: long enough to be replicated, short enough to leave nothing behind. */
const MARKER_TTL_MS = 10_000;
/** A master whose replicas were counted as none is counted again after this long (auto mode). */
const RECOUNT_INTERVAL_MS = 10_000;

interface ReplicaWaitOptions {
  /** `auto`: one on every master if any master had a replica at start-up (see #decide); a number: that many everywhere. */
  replicas: 'auto' | number;
  timeoutMs: number;
  /** The marker key in the slot of `anchorKey` (which carries a hash tag). */
  markerKey(anchorKey: string): string;
  /** Where a round's failure is reported (the answer is `not_durable` either way). */
  onRoundError?: ((error: Error) => void) | undefined;
}

/** One master's rounds. */
interface MasterRounds {
  running: Promise<Durability> | null;
  /** The next round, shared by every withdrawal that asked while `running` ran. */
  next: Promise<Durability> | null;
}

export class ReplicaWait {
  readonly #connection: RedisConnection;
  readonly #options: ReplicaWaitOptions;
  readonly #rounds = new Map<string, MasterRounds>();
  /** Replicas every round waits for (see #decide). */
  #required = 0;
  #decidedAtMs = 0;

  /** `connection` is this wait's own (see the top of this file), connected already. */
  constructor(connection: RedisConnection, options: ReplicaWaitOptions) {
    this.#connection = connection;
    this.#options = options;
  }

  /** Decides what withdrawals wait for, so the start-up line can say it. */
  async start(): Promise<void> {
    await this.#decide();
  }

  /** What withdrawals wait for, in words: "1 replica on every master", "no replica (…)". */
  describe(): string {
    if (this.#options.replicas === 0) return 'nothing (REDIS_WAIT_REPLICAS=0)';
    if (this.#required === 0) return 'no replica (none was connected at start-up; counted again every 10 s)';
    const replicas = `${this.#required} replica${this.#required === 1 ? '' : 's'}`;
    return this.#connection instanceof Cluster ? `${replicas} on every master` : replicas;
  }

  /**
   * Resolves `durable` once the writes acknowledged so far to the records behind `anchorKeys` are
   * on the required replicas, `not_durable` when they did not all answer within the timeout (or the
   * round failed). Never throws: the withdrawal is written either way; this says whether it would
   * survive the loss of its master.
   */
  async confirm(anchorKeys: readonly string[]): Promise<Durability> {
    if (this.#options.replicas === 0 || anchorKeys.length === 0) return 'durable';
    if (this.#required === 0 && Date.now() - this.#decidedAtMs > RECOUNT_INTERVAL_MS) {
      try {
        await this.#decide();
      } catch (error) {
        // The count could not be taken now (this connection is reconnecting, or Redis is slow to
        // answer INFO): the last count, none, stands until the next one, an interval later.
        // Answering not_durable would refuse every withdrawal on a deployment that has no replica
        // to wait for, for as long as this one connection is slow, with a message blaming a replica
        // that does not exist; a busy machine did exactly that in a test.
        this.#decidedAtMs = Date.now();
        this.#options.onRoundError?.(error as Error);
      }
    }
    if (this.#required === 0) return 'durable';
    // One anchor per master suffices: a round on a master covers every write it took before it.
    const byMaster = new Map<string, string>();
    for (const key of anchorKeys) {
      const master = this.#masterOf(key);
      if (!byMaster.has(master)) byMaster.set(master, key);
    }
    const outcomes = await Promise.all([...byMaster].map(([master, key]) => this.#join(master, key)));
    return outcomes.every((o) => o === 'durable') ? 'durable' : 'not_durable';
  }

  /**
   * auto: if any master has a replica, every master waits for one, including masters met later (a
   * replica promoted by a failover has none until its old master returns, and a withdrawal there is
   * then honestly not durable); if none has, nothing is waited for, and the count is taken again
   * every RECOUNT_INTERVAL_MS so that a replica added later turns waiting on (a count that fails
   * leaves it at none until the next). The count is never
   * lowered: a replica that stops answering is exactly what the wait must notice.
   */
  async #decide(): Promise<void> {
    const configured = this.#options.replicas;
    if (configured !== 'auto') {
      this.#required = configured;
      return;
    }
    const masters = this.#connection instanceof Cluster ? this.#connection.nodes('master') : [this.#connection];
    const counts = await Promise.all(masters.map((node) => within(connectedReplicas(node), this.#options.timeoutMs * 2 + 1000, 'counting replicas')));
    this.#required = Math.max(this.#required, counts.some((n) => n > 0) ? 1 : 0);
    this.#decidedAtMs = Date.now();
  }

  /** The master serving `key` as this connection's slot map has it ("single" for one Redis). */
  #masterOf(key: string): string {
    if (!(this.#connection instanceof Cluster)) return 'single';
    return this.#connection.slots[calculateSlot(key)]?.[0] ?? 'unknown';
  }

  #join(master: string, anchorKey: string): Promise<Durability> {
    let rounds = this.#rounds.get(master);
    if (rounds === undefined) {
      rounds = { running: null, next: null };
      this.#rounds.set(master, rounds);
    }
    const state = rounds;
    if (state.running === null) return this.#run(state, anchorKey);
    state.next ??= state.running.then(() => {
      state.next = null;
      return this.#run(state, anchorKey);
    });
    return state.next;
  }

  #run(state: MasterRounds, anchorKey: string): Promise<Durability> {
    const round = this.#round(anchorKey).finally(() => {
      if (state.running === round) state.running = null;
    });
    state.running = round;
    return round;
  }

  /**
   * One round: the marker and WAIT on the anchor's master. ioredis follows a MOVED or ASK inside a
   * pipeline only when every other command in it is a read, and WAIT is not; so after a failover
   * the marker's redirection comes back here, and since this connection sends nothing else, its
   * slot map would stay stale for good. The round then refreshes the map and tries once more.
   */
  async #round(anchorKey: string): Promise<Durability> {
    try {
      try {
        return await this.#markAndWait(anchorKey);
      } catch (error) {
        if (!(this.#connection instanceof Cluster) || !/^(MOVED|ASK) /.test((error as Error).message)) throw error;
        const cluster = this.#connection;
        const refreshed = new Promise<void>((resolve, reject) => cluster.refreshSlotsCache((e) => (e ? reject(e) : resolve())));
        await within(refreshed, this.#options.timeoutMs * 2 + 1000, 'refreshing the slot map');
        return await this.#markAndWait(anchorKey);
      }
    } catch (error) {
      this.#options.onRoundError?.(error as Error);
      return 'not_durable';
    }
  }

  /** One marker write and one WAIT, pipelined on this connection to the anchor's master. */
  async #markAndWait(anchorKey: string): Promise<Durability> {
    const { timeoutMs } = this.#options;
    const required = this.#required;
    const pipeline = this.#connection.pipeline().set(this.#options.markerKey(anchorKey), '1', 'PX', MARKER_TTL_MS).call('WAIT', String(required), String(timeoutMs));
    // WAIT answers within its timeout; the bound covers a master that answers nothing at all.
    const replies = await within(pipeline.exec(), timeoutMs * 2 + 1000, 'waiting for a replica');
    const failed = replies?.find(([error]) => error !== null)?.[0];
    if (failed) throw failed;
    const acknowledged = Number(replies?.[1]?.[1]);
    return acknowledged >= required ? 'durable' : 'not_durable';
  }
}

/** The replicas connected to this master now (INFO replication's connected_slaves). */
async function connectedReplicas(node: Redis): Promise<number> {
  const info = await node.info('replication');
  return Number(/^connected_slaves:(\d+)/m.exec(info)?.[1] ?? 0);
}
