// Which points of a latency series the /web chart draws. A window without first tokens has no
// TTFT percentile (the env reports 0 with raw.first_tokens = 0), one without two tokens of a
// request has no TBT percentile (raw.tbt_samples = 0): those windows are gaps, never a point at 0.
"use strict";

const SAMPLE_FLAG = { ttft_p50_s: "first_tokens", ttft_p99_s: "first_tokens", tbt_p99_s: "tbt_samples" };

// history: the raw metrics of each window, in order -> [value or null (a gap), ...]
function seriesPoints(history, key) {
  const flag = SAMPLE_FLAG[key];
  return history.map((p) => {
    const v = p ? p[key] : undefined;
    if (typeof v !== "number" || !Number.isFinite(v)) return null;
    if (flag && p[flag] === 0) return null;
    return v;
  });
}

if (typeof module !== "undefined") module.exports = { seriesPoints, SAMPLE_FLAG };
