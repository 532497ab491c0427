import type { RdmaCq } from './rdma-resources.js';
import { POLLIN, rawSocketLib } from './socket-ffi.js';

/**
 * A wait's sleep on the verbs completion channels: each completion queue is armed
 * (ibv_req_notify_cq, one-shot), polled once more (a completion that arrived before the arm
 * raises no event), then poll(2) blocks on the channels' descriptors for at most the slice the
 * fabric's CQ.wait gives (about 1 ms, so timers and sockets still run between slices). An event
 * is consumed and acknowledged (ibv_get_cq_event / ibv_ack_cq_events) and the queue re-armed by
 * the next sleep; the sleep then says so, and the wait polls at once rather than after an
 * event-loop turn. Without poll(2) (no libc through koffi) the sleep returns at once and the
 * wait polls between event-loop turns instead.
 */
export class CompletionSleeper {
  private fds = new Uint8Array(0);
  private readonly lib = rawSocketLib();

  constructor(
    private readonly queues: () => Iterable<RdmaCq>,
    private readonly progress: () => boolean,
  ) {}

  /** True when a completion ended the sleep (or turned up before it began): the wait polls at once. */
  sleep(ms: number): boolean {
    const lib = this.lib;
    if (lib === null) return false;
    const list = [...this.queues()];
    if (list.length === 0) return false;
    for (const q of list) if (!q.armed) q.arm();
    if (this.progress()) return true;
    if (this.fds.length < list.length * 8) this.fds = new Uint8Array(list.length * 8);
    const view = new DataView(this.fds.buffer);
    list.forEach((q, i) => {
      view.setInt32(i * 8, q.fd, true);
      view.setInt16(i * 8 + 4, POLLIN, true);
      view.setInt16(i * 8 + 6, 0, true);
    });
    if (lib.poll(this.fds, list.length, Math.max(1, Math.ceil(ms))) <= 0) return false;
    list.forEach((q, i) => {
      if (view.getInt16(i * 8 + 6, true) & POLLIN) q.consumeEvent();
    });
    return true;
  }
}
