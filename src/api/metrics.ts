/**
 * The server's counters, rendered as Prometheus text (exposition format 0.0.4). Counters only
 * grow; the gauges (queue depth, active slots) are read from the scheduler when scraped.
 */
export class Metrics {
  /** Finished HTTP requests by route and status. */
  private readonly requests = new Map<string, number>();
  promptTokens = 0;
  generatedTokens = 0;
  /** Sequences cut short: the client went away or the server stopped. */
  cancelled = 0;

  countRequest(route: string, status: number): void {
    const key = `route="${route}",status="${status}"`;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
  }

  render(gauges: { queueDepth: number; activeSlots: number; slots: number }): string {
    const lines: string[] = [];
    const metric = (name: string, type: string, help: string, samples: [string, number][]): void => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const [labels, value] of samples) lines.push(`${name}${labels ? `{${labels}}` : ''} ${value}`);
    };
    metric('tandem_requests_total', 'counter', 'HTTP requests answered, by route and status.', [
      ...this.requests,
    ]);
    metric('tandem_prompt_tokens_total', 'counter', 'Prompt tokens prefilled.', [['', this.promptTokens]]);
    metric('tandem_generated_tokens_total', 'counter', 'Tokens generated.', [['', this.generatedTokens]]);
    metric(
      'tandem_cancelled_total',
      'counter',
      'Sequences cancelled before they ended (client gone, server stopping).',
      [['', this.cancelled]],
    );
    metric('tandem_queue_depth', 'gauge', 'Requests waiting for a slot.', [['', gauges.queueDepth]]);
    metric('tandem_active_slots', 'gauge', 'Slots running a sequence.', [['', gauges.activeSlots]]);
    metric('tandem_slots', 'gauge', 'Slots (sequences that run at once).', [['', gauges.slots]]);
    return lines.join('\n') + '\n';
  }
}
