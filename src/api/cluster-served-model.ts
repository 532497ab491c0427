import {
  ClusterSlotModel,
  ServingCluster,
  startCluster,
  type ClusterStartOptions,
} from '../cluster/index.js';
import { configFromMetadata, GgufModelFile, Tokenizer, tokenizerMetadataFromGguf } from '../engine/index.js';
import { servingParts, type LoadServedOptions, type ServedModel, type ServingParts } from './served-model.js';

export type ClusterServeOptions = LoadServedOptions &
  Omit<ClusterStartOptions, 'model' | 'greedy' | 'contextLength' | 'onProgress'>;

/**
 * Opens a model for serving across a cluster's nodes (`tandem serve --nodes N | --hosts
 * FILE`): this process reads the tokenizer and template from the file, starts or reaches the
 * nodes, and loads the shards there with full logits (requests may sample and ask for
 * logprobs). The scheduler then drives every forward on the nodes (ClusterSlotModel), which
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
  const cluster = await startCluster({
    ...o,
    model: path,
    greedy: false,
    contextLength: parts.contextLength,
    onProgress: log,
  });
  const serving = new ServingCluster(cluster.session, cluster.placement, cluster.load);
  serving.onEvent = (e) => log(`cluster: ${e.message}`);
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
      serving.close();
      await cluster.close();
    },
  };
}
