import { resolve } from 'node:path';
import {
  ClusterPort,
  ClusterSession,
  DiscoveryResponder,
  ClusterSlotModel,
  DISCOVERY_PORT,
  ServingCluster,
  startCluster,
  type ClusterStartOptions,
  type LoadOptions,
} from '../cluster/index.js';
import { TandemError } from '../errors/index.js';
import { configFromMetadata, GgufModelFile, Tokenizer, tokenizerMetadataFromGguf } from '../engine/index.js';
import { servingParts, type LoadServedOptions, type ServedModel, type ServingParts } from './served-model.js';

export type ClusterServeOptions = LoadServedOptions &
  Omit<ClusterStartOptions, 'model' | 'greedy' | 'contextLength' | 'onProgress'> & {
    /** Listen here for members (`tandem node --join`) instead of --nodes/--hosts. */
    cluster?: string;
    /** With `cluster`: place the model once this many members have joined (default 1). */
    minMembers?: number;
    /** With `cluster`: answer discovery probes on this UDP port (default DISCOVERY_PORT; 0: not at all). */
    discoveryPort?: number;
    /** With `cluster`: called with the cluster port's address once it listens. */
    onClusterPort?: (address: string) => void;
    /** Expert parallel: re-place each layer's experts by the members' counters this often while serving. */
    rebalanceEverySeconds?: number;
  };

/**
 * Every `seconds`, the experts re-placed by the members' counters while serving (one at a time;
 * the outcome is the cluster's `experts` event; a failure is logged and the next tick tries
 * again). Returns the stop function.
 */
function rebalanceEvery(
  serving: ServingCluster,
  seconds: number | undefined,
  log: (line: string) => void,
): () => void {
  if (seconds === undefined) return () => {};
  let running = false;
  const timer = setInterval(() => {
    if (running || !serving.placed) return;
    running = true;
    serving
      .rebalanceExperts()
      .catch((e: unknown) => log(`experts not re-placed: ${(e as Error).message}`))
      .finally(() => (running = false));
  }, seconds * 1000);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Opens a model for serving across a cluster's nodes (`tandem serve --nodes N | --hosts
 * FILE`): this process reads the tokenizer and template from the file, starts or reaches the
 * nodes, and loads the shards there with full logits (requests may sample and ask for
 * logprobs; each step then asks for less where its rows need less: a greedy row's token id).
 * The scheduler drives every forward on the nodes (ClusterSlotModel), which
 * re-places the model on the survivors when a member is lost (ServingCluster); closing stops
 * the local nodes.
 */
export async function loadClusterServedModel(path: string, o: ClusterServeOptions): Promise<ServedModel> {
  const log = o.log ?? (() => {});
  let parts: ServingParts;
  const file = GgufModelFile.open(path);
  try {
    const config = configFromMetadata(
      (k) => file.meta(k),
      new Map([...file.tensors].map(([n, t]) => [n, t.dims])),
    );
    const tokenizer = new Tokenizer(tokenizerMetadataFromGguf(file.gguf.metadata.entries));
    parts = servingParts(path, file, tokenizer, config, o, log);
  } finally {
    file.close();
  }
  if (o.cluster !== undefined) return servedByMembers(path, parts, o);
  const cluster = await startCluster({
    ...o,
    model: path,
    greedy: false,
    contextLength: parts.contextLength,
    onProgress: log,
  });
  const serving = new ServingCluster(cluster.session, cluster.placement, cluster.load);
  serving.onEvent = (e) => log(`cluster: ${e.message}`);
  const stopRebalance = rebalanceEvery(serving, o.rebalanceEverySeconds, log);
  const model = new ClusterSlotModel(serving, parts.config, parts.contextLength);
  log(
    `loaded ${parts.config.arch} on ${cluster.placement.plan.nodes} node(s) (--parallel ${cluster.parallel} over ${cluster.provider}), context ${parts.contextLength} per slot`,
  );
  return {
    ...parts,
    model,
    cluster: () => serving.view(),
    problem: () => model.problem(),
    close: async () => {
      stopRebalance();
      serving.close();
      await cluster.close();
    },
  };
}

/**
 * `tandem serve MODEL --cluster HOST:PORT`: listens for members, places the model once enough
 * have joined and can hold it (resolving then), and keeps placing it as members join and
 * leave. The model path is sent to the members as an absolute path.
 */
async function servedByMembers(
  path: string,
  parts: ServingParts,
  o: ClusterServeOptions,
): Promise<ServedModel> {
  const log = o.log ?? (() => {});
  const secret = o.secret ?? process.env.TANDEM_SECRET;
  if (!secret)
    throw new TandemError('CLI_USAGE', 'serve --cluster needs the cluster secret', {
      hint: 'set TANDEM_SECRET to the secret the members are started with',
    });
  const load: LoadOptions = {
    model: resolve(path),
    parallel: o.parallel ?? 'auto',
    provider: o.provider ?? 'tcp',
    greedy: false,
    contextLength: parts.contextLength,
    ...(o.sequences ? { sequences: o.sequences } : {}),
    ...(o.tpSize !== undefined ? { tpSize: o.tpSize } : {}),
    ...(o.wire ? { wire: o.wire } : {}),
    ...(o.memLimit !== undefined ? { memLimit: o.memLimit } : {}),
    ...(o.expertProfile ? { expertProfile: o.expertProfile } : {}),
    onProgress: log,
  };
  const serving = new ServingCluster(ClusterSession.of([]), undefined, load, {
    ...(o.minMembers !== undefined ? { minMembers: o.minMembers } : {}),
  });
  serving.onEvent = (e) => log(`cluster: ${e.message}`);
  const port = await ClusterPort.listen(
    o.cluster as string,
    secret,
    (client, host, info) => serving.join(client, host, info),
    log,
  );
  log(`cluster port ${port.address}: members join with \`tandem node --join ${port.address}\``);
  // discovery is a convenience: a port another coordinator holds leaves joining by address
  const responder =
    o.discoveryPort === 0
      ? undefined
      : await DiscoveryResponder.start({
          secret,
          clusterAddress: port.address,
          ...(o.discoveryPort !== undefined ? { port: o.discoveryPort } : {}),
        }).then(
          (r) => {
            log(
              `answering discovery (tandem node --discover) on UDP port ${o.discoveryPort ?? DISCOVERY_PORT}`,
            );
            return r;
          },
          (e: unknown) => void log(`${(e as Error).message}; members join by address`),
        );
  o.onClusterPort?.(port.address);
  const stopRebalance = rebalanceEvery(serving, o.rebalanceEverySeconds, log);
  const close = async (): Promise<void> => {
    stopRebalance();
    serving.close();
    await Promise.all([port.close(), responder?.close()]);
  };
  try {
    await serving.whenPlaced(2 ** 31 - 1);
  } catch (error) {
    await close();
    throw error;
  }
  const model = new ClusterSlotModel(serving, parts.config, parts.contextLength);
  return {
    ...parts,
    model,
    cluster: () => serving.view(),
    problem: () => model.problem(),
    close,
  };
}
