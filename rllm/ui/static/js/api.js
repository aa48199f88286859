// The JSON API of `rllm ui` (see docs/ui.md): one fetch helper and the metric stream.

import { buildQuery } from "./util.js";

export class ApiError extends Error {}

/** GET /api/<path> with query params; resolves to the parsed JSON, rejects with the server's message. */
export async function getJSON(path, params) {
  const url = `api/${path}${buildQuery(params)}`;
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" } });
  } catch (error) {
    throw new ApiError(`the rllm ui server did not answer (${error.message}); is \`rllm ui\` still running?`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    /* a non-JSON error page: fall through to the status line */
  }
  if (!response.ok) throw new ApiError((body && body.error) || `${url} answered ${response.status}`);
  return body;
}

/**
 * Follow a run's metrics as they are written: GET /api/runs/{id}/metrics/stream (Server-Sent Events).
 *
 * `onData({series, last_step})` gets each batch of new points. When the run stops running the server
 * sends `event: end` and `onEnd()` is called. A dropped connection calls `onEnd()` too, which resolves
 * to whether the run is still running; if so we reconnect from the last step seen, so no point is lost
 * (callers drop repeated points with appendPoints). Returns a function that stops following.
 */
export function followMetrics(runId, { keys, afterStep, onData, onEnd }) {
  let lastStep = afterStep ?? null;
  let source = null;
  let stopped = false;
  let retryTimer = null;
  let failures = 0;

  const open = () => {
    const params = { keys: keys && keys.length ? keys.join(",") : null, after_step: lastStep };
    source = new EventSource(`api/runs/${encodeURIComponent(runId)}/metrics/stream${buildQuery(params)}`);
    source.onmessage = (event) => {
      failures = 0;
      const payload = JSON.parse(event.data);
      if (payload.last_step !== null && payload.last_step !== undefined) {
        lastStep = Math.max(lastStep ?? -Infinity, payload.last_step);
      }
      onData(payload);
    };
    source.addEventListener("end", () => {
      stopped = true;
      source.close();
      if (onEnd) onEnd();
    });
    source.onerror = () => {
      // EventSource would reconnect on its own, from the original after_step; we reopen ourselves from
      // the last step seen, and ask the caller whether the run is still going (the server closes the
      // stream of a run that ended, which looks the same as a dropped connection).
      source.close();
      if (stopped) return;
      failures += 1;
      Promise.resolve(onEnd ? onEnd() : false).catch(() => true).then((keepGoing) => {
        if (stopped || !keepGoing) return;
        retryTimer = setTimeout(open, Math.min(10000, 500 * 2 ** Math.min(failures, 5)));
      });
    };
  };
  open();
  return () => {
    stopped = true;
    clearTimeout(retryTimer);
    if (source) source.close();
  };
}
