import type { Communicator } from '../collectives/communicator.js';
import type {
  ExpertDispatch,
  ExpertOutputs,
  ExpertRequest,
  RunExpert,
  RunExperts,
} from '../engine/model/comm.js';
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

/**
 * Where one layer's experts live: copies[e] the ranks holding e (empty: nobody); print a
 * fingerprint of the table (24 bits: exact as f32), which every rank sends with its routing so
 * that ranks placing the experts differently fail instead of combining wrong outputs.
 */
interface OwnerTable {
  copies: readonly (readonly number[])[];
  print: number;
}

function ownerTable(copies: readonly (readonly number[])[]): OwnerTable {
  let h = 0x811c9dc5; // FNV-1a over the expert count, then each expert's holders and a separator
  const mix = (v: number): void => {
    h = Math.imul(h ^ (v & 0xff), 0x01000193) >>> 0;
    h = Math.imul(h ^ (v >>> 8), 0x01000193) >>> 0;
  };
  mix(copies.length);
  for (const c of copies) {
    for (const r of c) mix(r);
    mix(0xffff);
  }
  return { copies: copies.map((c) => [...c]), print: h & 0xffffff };
}

/** Batches of up to this many tokens (decode steps) are routed whole on every rank (routesLocally). */
const LOCAL_TOKENS = 8;
/** An outputs part's header: the rows the rank ran, then its routing's print (two 24-bit halves). */
const OUT_HEADER = 3;

/**
 * A print of a batch's routing (ids and the weights' bits), two 24-bit halves (exact as f32):
 * ranks that route the same batch alike have equal prints.
 */
function routingPrint(ids: Int32Array, weights: Float32Array): [number, number] {
  const bits = new Uint32Array(weights.buffer, weights.byteOffset, weights.length);
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let i = 0; i < ids.length; i++) {
    a = Math.imul(a ^ (ids[i]! & 0xffff), 0x01000193) >>> 0;
    a = Math.imul(a ^ bits[i]!, 0x01000193) >>> 0;
    b = Math.imul(b ^ bits[i]!, 0x5bd1e995) >>> 0;
    b = Math.imul(b ^ (b >>> 15) ^ ids[i]!, 0x5bd1e995) >>> 0;
  }
  return [a & 0xffffff, b & 0xffffff];
}

/**
 * Expert parallel over a communicator. Every rank holds every token's hidden row, so tokens do
 * not travel: one dispatch (one MoE layer) is at most two all-gathers.
 *
 * 1. routing: every rank's share's choices and weights ([m, used] each, padded to the largest
 *    share) and its placement's fingerprint, so every rank knows the whole batch's routing. A
 *    batch of up to LOCAL_TOKENS (a decode step) skips it: every rank routes the whole batch
 *    itself (routesLocally) and step 2 carries each rank's print of it; where the prints
 *    differ, every rank sees it, runs the layer again with the routing gathered, and the
 *    group gathers the routing from then on (sharedRouting);
 * 2. outputs: every rank runs its experts on its own copy of the rows routed to them and
 *    gathers the outputs ([rows, print, then rows x width], padded to the busiest rank's, or
 *    to every choice when routed locally) to every rank, which then combines every token.
 *
 * Who runs a choice is a function of the routing that every rank evaluates alike: the
 * expert's holder, or with copies the one picked round robin by the token's index in the
 * batch. A rank runs an expert's tokens in ascending order: the rows and order one node runs
 * it on, hence the same outputs bit for bit; outputs travel as f32 whatever the all-reduce
 * wire (exact). A gather goes through the group's direct exchange (shm nodes: one RDMA write
 * of the part to every peer) when the part fits its chunk, else through the communicator.
 */
export class CollectiveExpertDispatch implements ExpertDispatch {
  /** The owners of every layer's experts (`all`), or of each layer's (`layers`, by model layer). */
  private all: OwnerTable | undefined;
  private layers: OwnerTable[] | undefined;
  private rowsIn = new Float32Array(0);
  /** This rank's part of the outputs' gather, and every rank's (grown, never shrunk). */
  private outPart = new Float32Array(0);
  private gathered = new Float32Array(0);
  /** Set for good once two ranks routed a batch differently: the routing travels from then on. */
  private sharedRouting = false;

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
    if (owners instanceof Int32Array) {
      this.all = ownerTable(Array.from(owners, (o) => (o >= 0 ? [o] : [])));
      this.layers = undefined;
    } else if ('layers' in owners) {
      this.all = undefined;
      this.layers = owners.layers.map(ownerTable);
    } else {
      this.all = ownerTable(owners);
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
    return this.shareOf(this.comm.rank, n);
  }

  private shareOf(rank: number, n: number): { start: number; end: number } {
    const size = this.comm.size;
    // ceil: a single token (decode) belongs to rank 0
    return { start: Math.ceil((n * rank) / size), end: Math.ceil((n * (rank + 1)) / size) };
  }

  routesLocally(n: number): boolean {
    return !this.sharedRouting && n <= LOCAL_TOKENS;
  }

  async dispatch(request: ExpertRequest, run: RunExpert | RunExperts): Promise<ExpertOutputs> {
    const { n, used } = request;
    const layer = request.layer ?? 0;
    const table = this.tableFor(layer);
    if (this.routesLocally(n)) {
      const local = request.routing;
      if (!local || local.ids.length !== n * used || local.weights.length !== n * used)
        throw this.fail(`rank ${this.comm.rank} did not route the whole batch of ${n} tokens itself`, {
          hint: 'pass request.routing ([n, used] choices and weights) when routesLocally(n)',
          details: { rank: this.comm.rank, n },
        });
      this.checkIds(local.ids, table, this.comm.rank);
      // the print covers the placement too: ranks that place differently fall back to the
      // shared routing, whose fingerprint check names the fault
      const [hi, lo] = routingPrint(local.ids, local.weights);
      const done = await this.runAndGather(request, table, local.ids, local.weights, run, {
        print: [hi ^ table.print, lo],
        bound: n * used,
      });
      if (done) return done;
      // Some rank routed differently (kernels that round differently: a GPU, another ISA).
      // Every rank saw every print, so the whole group shares the routing from now on, and
      // runs this layer again that way.
      this.sharedRouting = true;
    }
    const { ids, weights } = await this.gatherRouting(request, table, layer);
    return (await this.runAndGather(request, table, ids, weights, run))!;
  }

  /**
   * Collective (step 2): runs this rank's experts on its copy of the rows routed to them and
   * gathers every rank's outputs ([rows, print, then rows x width], padded to the busiest
   * rank's, or with `check` to `check.bound` rows, which holds whatever the routing). With
   * `check` (routed locally) every rank's routing print travels too, and undefined comes back,
   * on every rank alike, when they differ.
   */
  private async runAndGather(
    request: ExpertRequest,
    table: OwnerTable,
    ids: Int32Array,
    weights: Float32Array,
    run: RunExpert | RunExperts,
    check?: { print: readonly [number, number]; bound: number },
  ): Promise<ExpertOutputs | undefined> {
    const { rows, n, used, width } = request;
    const layer = request.layer ?? 0;
    const { rank, size } = this.comm;
    const { order, begin } = this.assign(table, ids, n, used);
    const experts = table.copies.length;
    const rowsOf = (r: number): number => begin[(r + 1) * experts]! - begin[r * experts]!;
    const most = check ? check.bound : Math.max(...Array.from({ length: size }, (_, r) => rowsOf(r)));
    const part = OUT_HEADER + most * width;
    const own = rowsOf(rank);
    if (this.outPart.length < part) this.outPart = new Float32Array(part);
    // past this rank's rows the part is padding, which no rank reads
    const mine = this.outPart.subarray(0, part);
    mine[0] = own;
    mine[1] = check?.print[0] ?? 0;
    mine[2] = check?.print[1] ?? 0;
    await this.runOwn(
      table,
      rows,
      order,
      begin,
      used,
      width,
      run,
      mine.subarray(OUT_HEADER, OUT_HEADER + own * width),
    );
    if (this.gathered.length < size * part) this.gathered = new Float32Array(size * part);
    const y = this.gathered.subarray(0, size * part);
    await this.gather(mine, y);
    if (check)
      for (let r = 0; r < size; r++)
        if (y[r * part + 1] !== y[1] || y[r * part + 2] !== y[2]) return undefined;
    for (let r = 0; r < size; r++) {
      if (y[r * part] !== rowsOf(r))
        throw this.fail(
          `rank ${r} ran ${y[r * part]} expert rows of layer ${layer}, rank ${rank} expected ${rowsOf(r)}`,
          {
            hint: 'run the same tandem version on every node',
            details: { from: r, layer },
          },
        );
    }
    // choice p's output row: in its runner's part, at its place in the runner's order
    const at = new Int32Array(n * used).fill(-1);
    for (let r = 0; r < size; r++) {
      const from = begin[r * experts] as number;
      for (let i = from; i < (begin[(r + 1) * experts] as number); i++)
        at[order[i] as number] = r * part + OUT_HEADER + (i - from) * width;
    }
    return { ids, weights, y, at };
  }

  /** Every choice names an expert some rank of the group holds (or -1); `from`: the rank that routed them. */
  private checkIds(ids: Int32Array, table: OwnerTable, from: number): void {
    const experts = table.copies.length;
    for (let q = 0; q < ids.length; q++) {
      const e = ids[q] as number;
      if (!Number.isInteger(e) || e < -1 || e >= experts || (e >= 0 && table.copies[e]!.length === 0))
        throw this.fail(
          `rank ${from} routed a token to expert ${e}, which no rank of the group holds (${experts} experts)`,
          {
            hint: 'load the model with a plan from buildPlan: expert parallel spreads every expert over the group',
            details: { expert: e, experts, from },
          },
        );
    }
  }

  /**
   * Collective (step 1): every rank's share of the routing, and its placement's fingerprint,
   * to every rank; returns the whole batch's choices and weights [n, used].
   */
  private async gatherRouting(
    request: ExpertRequest,
    table: OwnerTable,
    layer: number,
  ): Promise<{ ids: Int32Array; weights: Float32Array }> {
    const { n, used } = request;
    const { rank, size } = this.comm;
    const counts = Array.from({ length: size }, (_, r) => {
      const { start, end } = this.shareOf(r, n);
      return (end - start) * used;
    });
    const mineCount = counts[rank] as number;
    if (request.ids.length !== mineCount || request.weights.length !== mineCount)
      throw this.fail(
        `rank ${rank} routed ${request.ids.length} choices (weights ${request.weights.length}), its share of ${n} tokens has ${mineCount}`,
        { hint: 'route exactly the tokens of share(n)', details: { rank, n } },
      );
    const most = Math.max(...counts);
    const part = 1 + 2 * most;
    const mine = new Float32Array(part);
    mine[0] = table.print;
    for (let q = 0; q < mineCount; q++) mine[1 + q] = request.ids[q] as number;
    mine.set(request.weights, 1 + most);
    const all = new Float32Array(size * part);
    await this.gather(mine, all);
    const ids = new Int32Array(n * used);
    const weights = new Float32Array(n * used);
    for (let r = 0, at = 0; r < size; at += counts[r]!, r++) {
      if (all[r * part] !== table.print)
        throw this.fail(`rank ${r} places the experts of layer ${layer} differently from rank ${rank}`, {
          hint: 'load the model on every node from the same plan; run the same tandem version on every node',
          details: { from: r, layer },
        });
      for (let q = 0; q < counts[r]!; q++) {
        ids[at + q] = all[r * part + 1 + q] as number;
        weights[at + q] = all[r * part + 1 + most + q] as number;
      }
      this.checkIds(ids.subarray(at, at + counts[r]!), table, r);
    }
    return { ids, weights };
  }

  /**
   * Who runs each choice: order lists the choices (t * used + j) sorted by (runner rank,
   * expert, token), and begin[r * experts + e] is where runner r's choices of expert e start
   * in it (begin[size * experts] = all). A choice goes to its expert's copy for the token
   * (round robin over the copies by the token's index in the batch). Slots without an expert
   * (-1) are left out.
   */
  private assign(
    table: OwnerTable,
    ids: Int32Array,
    n: number,
    used: number,
  ): { order: Int32Array; begin: Int32Array } {
    const experts = table.copies.length;
    const pairs = n * used;
    const key = new Int32Array(pairs);
    const begin = new Int32Array(this.comm.size * experts + 1);
    for (let p = 0; p < pairs; p++) {
      const e = ids[p] as number;
      key[p] = -1;
      if (e < 0) continue;
      const copies = table.copies[e]!;
      const dest = copies[Math.floor(p / used) % copies.length] as number;
      key[p] = dest * experts + e;
      begin[key[p]! + 1]!++;
    }
    for (let k = 0; k < this.comm.size * experts; k++) begin[k + 1]! += begin[k] as number;
    const order = new Int32Array(begin[this.comm.size * experts] as number);
    const fill = begin.slice();
    for (let p = 0; p < pairs; p++) if (key[p]! >= 0) order[fill[key[p]!]!++] = p;
    return { order, begin };
  }

  /**
   * Runs this rank's experts on its own copy of the rows routed to them (rows [n, width]),
   * expert by expert in ascending id, each on its tokens in ascending order, or in one batch;
   * outputs into ys [own rows, width] in this rank's order.
   */
  private async runOwn(
    table: OwnerTable,
    rows: Float32Array,
    order: Int32Array,
    begin: Int32Array,
    used: number,
    width: number,
    run: RunExpert | RunExperts,
    ys: Float32Array,
  ): Promise<void> {
    const experts = table.copies.length;
    const base = this.comm.rank * experts;
    const lo = begin[base] as number;
    const total = (begin[base + experts] as number) - lo;
    if (total === 0) return;
    if (this.rowsIn.length < total * width) this.rowsIn = new Float32Array(total * width);
    const xs = this.rowsIn.subarray(0, total * width);
    for (let i = 0; i < total; i++) {
      const t = Math.floor((order[lo + i] as number) / used);
      xs.set(rows.subarray(t * width, (t + 1) * width), i * width);
    }
    const ran = Int32Array.from({ length: experts }, (_, e) => e).filter(
      (e) => begin[base + e + 1]! > begin[base + e]!,
    );
    if (typeof run === 'function') {
      for (const e of ran) {
        const [from, to] = [(begin[base + e]! - lo) * width, (begin[base + e + 1]! - lo) * width];
        run(e, xs.subarray(from, to), ys.subarray(from, to), begin[base + e + 1]! - begin[base + e]!);
      }
    } else {
      await run.batch(
        ran,
        Int32Array.from([...ran, experts], (e) => begin[base + e]! - lo),
        xs,
        ys,
      );
    }
  }

  /** Collective: every rank's `mine` (the same length on all) into out [size, mine.length], metered. */
  private async gather(mine: Float32Array, out: Float32Array): Promise<void> {
    const bytes = 4 * mine.length * (this.comm.size - 1);
    const ex = this.exchange;
    if (ex && mine.length <= ex.chunk) await this.meter.time(bytes, ex.allGather(mine, out));
    else await this.meter.time(bytes, this.comm.allGather(mine, { out }));
  }

  /**
   * The group cannot go on (the others would wait on this rank until their deadline): aborts
   * the communicator so they fail at once, and returns the error to throw.
   */
  private fail(message: string, o: { hint: string; details: Record<string, unknown> }): TandemError {
    const e = new TandemError('PAR_EXCHANGE', message, o);
    this.comm.abort(message);
    this.exchange?.abort(message);
    return e;
  }
}
