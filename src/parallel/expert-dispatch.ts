import type { Communicator } from '../collectives/communicator.js';
import type { ExpertDispatch, ExpertRequest, RunExpert, RunExperts } from '../engine/model/comm.js';
import { TandemError } from '../errors/index.js';
import type { ParallelPlan } from './plan.js';
import type { CommMeter } from './shard-comm.js';
import type { TpExchange } from './tp-exchange.js';

/**
 * Which ranks of its expert-parallel group hold each routed expert (indexed by expert id;
 * more than one where a hot expert has copies), or undefined when the stage's ranks do not
 * hold whole experts spread over the group (tensor parallel slices every expert instead).
 */
export function expertOwners(plan: ParallelPlan, stage: number): number[][] | undefined {
  const ranks = plan.ranks.filter((r) => r.stage === stage);
  const count = Math.max(0, ...ranks.flatMap((r) => r.shard.experts.map((e) => e + 1)));
  if (plan.kind !== 'ep' || ranks.length < 2 || count === 0) return undefined;
  const copies = Array.from({ length: count }, () => [] as number[]);
  for (const r of ranks) for (const e of r.shard.experts) copies[e]!.push(r.tpRank);
  return copies.map((c) => c.sort((a, b) => a - b));
}

/** Owners of every routed expert, one table per model layer ([layer][expert]: the ranks holding it). */
export interface LayerOwners {
  layers: readonly (readonly (readonly number[])[])[];
}

/**
 * The owners a stage's dispatch follows: per layer where the plan places experts per layer
 * (ShardSpec.layerExperts), else one table for every layer (expertOwners).
 */
export function dispatchOwners(plan: ParallelPlan, stage: number): number[][] | LayerOwners | undefined {
  const owners = expertOwners(plan, stage);
  const ranks = plan.ranks.filter((r) => r.stage === stage);
  const layers = ranks[0]?.shard.layerExperts?.length ?? 0;
  if (!owners || !ranks.every((r) => r.shard.layerExperts)) return owners;
  return {
    layers: Array.from({ length: layers }, (_, l) => {
      const copies = owners.map(() => [] as number[]);
      for (const r of ranks) for (const e of r.shard.layerExperts![l]!) copies[e]!.push(r.tpRank);
      return copies.map((c) => c.sort((a, b) => a - b));
    }),
  };
}

/** Where one layer's experts live: copies[e] the ranks holding e (empty: nobody); held[e] 1 where this rank does. */
interface OwnerTable {
  copies: readonly (readonly number[])[];
  held: Uint8Array;
}

/**
 * Expert parallel over a communicator: tokens travel to the ranks holding their experts and
 * their outputs travel back. One dispatch (one MoE layer) is three steps:
 *
 * 1. counts: every rank's row count per destination is gathered everywhere ([size, size]
 *    i32), so every rank knows every transfer's size;
 * 2. tokens: one row per (token, expert) choice, width + 1 f32 (the expert id, then the
 *    hidden row), to the expert's rank, by all-to-all; rows for this rank's own experts are
 *    copied locally and never touch the wire;
 * 3. outputs: width f32 per row back to its sender, by all-to-all, in the order the rows
 *    came, so the sender knows each one's (token, expert) without ids.
 *
 * Steps 2 and 3 are skipped when no rank has a row for another (every rank knows). They run
 * through the communicator's all-to-all (only the rows for a peer go to it), or, when the
 * group has a direct exchange (shm nodes) and the largest part fits its chunk, through the
 * exchange: each rank writes all its outgoing rows, padded to the group's largest, to every
 * peer in one RDMA write, and each peer keeps the rows addressed to it. That is the same
 * bytes as an all-to-all on 2 ranks and up to (size - 1) x on more, for a fraction of the
 * router's latency.
 *
 * A sender orders its rows by expert, then token, and the shares are contiguous in rank
 * order; so a receiver that takes, per expert, the rows of rank 0, then rank 1, ... runs the
 * expert on its tokens in ascending order: the rows and order one node runs it on, hence the
 * same outputs bit for bit. Rows travel as f32 whatever the all-reduce wire (exact).
 */
/** Rows one rank may announce for another in one dispatch (f32 counts stay exact). */
const MAX_ROWS = 1 << 24;

export class CollectiveExpertDispatch implements ExpertDispatch {
  /** The owners of every layer's experts (`all`), or of each layer's (`layers`, by model layer). */
  private all: OwnerTable | undefined;
  private layers: OwnerTable[] | undefined;
  private rowsIn = new Float32Array(0);
  private rowsOut = new Float32Array(0);
  private result = new Float32Array(0);

  constructor(
    private readonly comm: Communicator,
    owners: Int32Array | readonly (readonly number[])[] | LayerOwners,
    private readonly meter: CommMeter,
    private readonly exchange?: TpExchange,
  ) {
    this.setOwners(owners);
  }

  /**
   * Follows new owners from the next dispatch on: every rank of the group switches at the same
   * step boundary (a re-placement of experts), after the experts it now holds are loaded.
   */
  setOwners(owners: Int32Array | readonly (readonly number[])[] | LayerOwners): void {
    const table = (copies: readonly (readonly number[])[]): OwnerTable => ({
      copies: copies.map((c) => [...c]),
      held: Uint8Array.from(copies, (c) => (c.includes(this.comm.rank) ? 1 : 0)),
    });
    if (owners instanceof Int32Array) {
      this.all = table(Array.from(owners, (o) => (o >= 0 ? [o] : [])));
      this.layers = undefined;
    } else if ('layers' in owners) {
      this.all = undefined;
      this.layers = owners.layers.map(table);
    } else {
      this.all = table(owners);
      this.layers = undefined;
    }
  }

  /** The owners of model layer `layer`'s experts. */
  private tableFor(layer: number): OwnerTable {
    const t = this.layers ? this.layers[layer] : this.all;
    if (!t)
      throw this.fail(`no expert placement for layer ${layer} (${this.layers?.length ?? 0} layers placed)`, {
        hint: 'load the model with a plan from buildPlan: it places the experts of every layer',
        details: { layer },
      });
    return t;
  }

  share(n: number): { start: number; end: number } {
    const { rank, size } = this.comm;
    // ceil: a single token (decode) belongs to rank 0
    return { start: Math.ceil((n * rank) / size), end: Math.ceil((n * (rank + 1)) / size) };
  }

  async dispatch(request: ExpertRequest, run: RunExpert | RunExperts): Promise<Float32Array> {
    const { rows, ids, tokens, used, width } = request;
    const rank = this.comm.rank;
    const row = width + 1;
    const table = this.tableFor(request.layer ?? 0);
    const { slotPair, sendRows } = this.layout(table, ids, tokens * used, used, request.first ?? 0);
    const total = slotPair.length;
    const send = new Float32Array(total * row);
    for (let q = 0; q < total; q++) {
      const p = slotPair[q] as number;
      const t = Math.floor(p / used);
      send[q * row] = ids[p] as number;
      send.set(rows.subarray(t * width, (t + 1) * width), q * row + 1);
    }
    const size = this.comm.size;
    const counts = await this.gatherCounts(sendRows);
    // rows rank s sends rank d in step 2 (and d sends s back in step 3)
    const to = (s: number, d: number): number => counts[s * size + d] as number;
    const recv = await this.allToAll(send, to, row);
    const recvRows = Array.from({ length: size }, (_, s) => to(s, rank));
    const back = await this.runExperts(table, recv, recvRows, width, run);
    const ret = await this.allToAll(back, (s, d) => to(d, s), width);
    if (this.result.length < tokens * used * width) this.result = new Float32Array(tokens * used * width);
    const out = this.result.subarray(0, tokens * used * width);
    out.fill(0);
    for (let q = 0; q < total; q++)
      out.set(ret.subarray(q * width, (q + 1) * width), (slotPair[q] as number) * width);
    return out;
  }

  /**
   * The send order of this rank's choices: slotPair[q] is the choice (t * used + j) in slot
   * q, sorted by (destination rank, expert, token); sendRows[r] the choices going to rank r.
   * A choice goes to its expert's copy for the token (round robin over the copies by the
   * token's index in the whole batch, `first` + t, which every rank computes alike). Slots
   * without an expert (-1) are left out.
   */
  private layout(
    table: OwnerTable,
    ids: Int32Array,
    pairs: number,
    used: number,
    first: number,
  ): { slotPair: Int32Array; sendRows: number[] } {
    const experts = table.copies.length;
    const size = this.comm.size;
    const key = new Int32Array(pairs);
    const count = new Int32Array(size * experts + 1);
    for (let p = 0; p < pairs; p++) {
      const e = ids[p] as number;
      key[p] = -1;
      if (e < 0) continue;
      const copies = table.copies[e];
      if (e >= experts || !copies || copies.length === 0) {
        throw this.fail(`expert ${e} was routed to, but no rank of the group holds it (${experts} experts)`, {
          hint: 'load the model with a plan from buildPlan: expert parallel spreads every expert over the group',
          details: { expert: e, experts },
        });
      }
      const dest = copies[(first + Math.floor(p / used)) % copies.length] as number;
      key[p] = dest * experts + e;
      count[key[p]! + 1]!++;
    }
    const sendRows = new Array<number>(size).fill(0);
    for (let k = 0; k < size * experts; k++) {
      sendRows[Math.floor(k / experts)]! += count[k + 1] as number;
      count[k + 1]! += count[k] as number;
    }
    const slotPair = new Int32Array(count[size * experts] as number);
    for (let p = 0; p < pairs; p++) if (key[p]! >= 0) slotPair[count[key[p]!]!++] = p;
    return { slotPair, sendRows };
  }

  /**
   * The group cannot go on (the others would wait on this rank's rows until their deadline):
   * aborts the communicator so they fail at once, and returns the error to throw.
   */
  private fail(message: string, o: { hint: string; details: Record<string, unknown> }): TandemError {
    const e = new TandemError('PAR_EXCHANGE', message, o);
    this.comm.abort(message);
    this.exchange?.abort(message);
    return e;
  }

  /** Collective: every rank's rows per destination; [s * size + d] is what rank s sends rank d. */
  private async gatherCounts(sendRows: number[]): Promise<Int32Array> {
    const size = this.comm.size;
    const ex = this.exchange;
    const bytes = 4 * size * (size - 1);
    let all: Int32Array;
    if (ex) {
      const got = new Float32Array(size * size);
      await this.meter.time(bytes, ex.allGather(Float32Array.from(sendRows), got));
      all = Int32Array.from(got);
      if (got.some((c, i) => c !== all[i])) all.fill(-1); // not integers: rejected below
    } else {
      all = new Int32Array(size * size);
      await this.meter.time(bytes, this.comm.allGather(Int32Array.from(sendRows), { out: all }));
    }
    const bad = all.findIndex((c) => c < 0 || c > MAX_ROWS);
    if (bad >= 0) {
      throw this.fail(`rank ${Math.floor(bad / size)} announced ${all[bad]} rows for rank ${bad % size}`, {
        hint: 'run the same tandem version on every node',
        details: { from: Math.floor(bad / size), to: bad % size },
      });
    }
    return all;
  }

  /**
   * Collective: `rows(s, d)` rows of `per` f32 go from every rank s to every rank d (every
   * rank knows them all); `send` holds this rank's rows by destination. Returns the rows
   * received, by source rank (this rank's own copied locally).
   */
  private async allToAll(
    send: Float32Array,
    rows: (s: number, d: number) => number,
    per: number,
  ): Promise<Float32Array> {
    const { size, rank } = this.comm;
    const sendCounts = Array.from({ length: size }, (_, d) => rows(rank, d) * per);
    const recvCounts = Array.from({ length: size }, (_, s) => rows(s, rank) * per);
    let most = 0; // the most rows any rank sends to the others
    for (let s = 0; s < size; s++) {
      let out = 0;
      for (let d = 0; d < size; d++) if (d !== s) out += rows(s, d);
      most = Math.max(most, out);
    }
    const ownAt = sendCounts.slice(0, rank).reduce((a, b) => a + b, 0);
    if (most === 0) return send.subarray(ownAt, ownAt + (sendCounts[rank] as number));
    const ex = this.exchange;
    if (!ex || most * per > ex.chunk) {
      const bytes = 4 * sendCounts.reduce((a, c, d) => a + (d === rank ? 0 : c), 0);
      return (await this.meter.time(bytes, this.comm.allToAll(send, sendCounts, recvCounts))) as Float32Array;
    }
    // Through the direct exchange: this rank's outgoing rows (destination order, its own left
    // out) padded to `most`, written to every peer; each keeps its own part.
    const part = most * per;
    const mine = new Float32Array(part);
    for (let d = 0, from = 0, at = 0; d < size; from += sendCounts[d]!, d++) {
      if (d === rank) continue;
      mine.set(send.subarray(from, from + (sendCounts[d] as number)), at);
      at += sendCounts[d] as number;
    }
    const all = new Float32Array(size * part);
    await this.meter.time(4 * part * (size - 1), ex.allGather(mine, all));
    const recv = new Float32Array(recvCounts.reduce((a, b) => a + b, 0));
    for (let s = 0, at = 0; s < size; at += recvCounts[s]!, s++) {
      const n = recvCounts[s] as number;
      if (s === rank) {
        recv.set(send.subarray(ownAt, ownAt + n), at);
        continue;
      }
      let skip = 0; // rows s wrote before those for this rank
      for (let d = 0; d < rank; d++) if (d !== s) skip += rows(s, d) * per;
      recv.set(all.subarray(s * part + skip, s * part + skip + n), at);
    }
    return recv;
  }

  /**
   * Runs this rank's experts on the rows received (recv: [rows, width + 1], each its expert
   * id then its hidden row; rank order, each rank's rows by expert then token) and returns
   * their outputs [rows, width] in the same order. The rows are gathered by expert (a
   * counting sort, arrival order kept) into one block, run expert by expert or in one batch.
   */
  private async runExperts(
    table: OwnerTable,
    recv: Float32Array,
    recvRows: number[],
    width: number,
    run: RunExpert | RunExperts,
  ): Promise<Float32Array> {
    const row = width + 1;
    const total = recvRows.reduce((a, b) => a + b, 0);
    const experts = table.copies.length;
    const count = new Int32Array(experts + 1);
    for (let q = 0; q < total; q++) {
      const e = recv[q * row] as number;
      if (!Number.isInteger(e) || e < 0 || e >= experts || table.held[e] !== 1) {
        throw this.fail(`rank ${this.comm.rank} received a token for expert ${e}, which it does not hold`, {
          hint: 'run the same tandem version and plan on every node',
          details: { expert: e, rank: this.comm.rank },
        });
      }
      count[e + 1]!++;
    }
    for (let e = 0; e < experts; e++) count[e + 1]! += count[e] as number;
    // order[i]: the arrival index of the i-th row by expert
    const order = new Int32Array(total);
    const fill = count.slice(0, experts);
    for (let q = 0; q < total; q++) order[fill[recv[q * row] as number]!++] = q;
    if (this.rowsIn.length < total * width) {
      this.rowsIn = new Float32Array(total * width);
      this.rowsOut = new Float32Array(total * width);
    }
    const xs = this.rowsIn.subarray(0, total * width);
    const ys = this.rowsOut.subarray(0, total * width);
    for (let i = 0; i < total; i++) {
      const q = order[i] as number;
      xs.set(recv.subarray(q * row + 1, (q + 1) * row), i * width);
    }
    const ran = Int32Array.from({ length: experts }, (_, e) => e).filter((e) => count[e + 1]! > count[e]!);
    if (typeof run === 'function') {
      for (const e of ran) {
        const [from, to] = [(count[e] as number) * width, (count[e + 1] as number) * width];
        run(e, xs.subarray(from, to), ys.subarray(from, to), (count[e + 1] as number) - (count[e] as number));
      }
    } else if (ran.length > 0) {
      await run.batch(
        ran,
        Int32Array.from([...ran, experts], (e) => count[e] as number),
        xs,
        ys,
      );
    }
    const back = new Float32Array(total * width);
    for (let i = 0; i < total; i++)
      back.set(ys.subarray(i * width, (i + 1) * width), (order[i] as number) * width);
    return back;
  }
}
