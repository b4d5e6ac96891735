/** Percentiles and number formatting shared by the benchmarks. */

/** Nearest-rank percentile (p in 0..100) of unsorted samples. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]
}

export interface Summary {
  n: number
  p50: number
  p95: number
  p99: number
  min: number
  max: number
  mean: number
}

export function summarize(samples: number[]): Summary {
  return {
    n: samples.length,
    p50: percentile(samples, 50),
    p95: percentile(samples, 95),
    p99: percentile(samples, 99),
    min: Math.min(...samples),
    max: Math.max(...samples),
    mean: samples.reduce((a, b) => a + b, 0) / samples.length,
  }
}

export function median(samples: number[]): number {
  return percentile(samples, 50)
}

/** Milliseconds with a precision that suits their size. */
export function ms(value: number): string {
  return `${value < 10 ? value.toFixed(2) : value.toFixed(1)} ms`
}

export function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(2)} MiB`
}

/** Throughput in MB/s (10^6 bytes per second). */
export function mbps(bytes: number, elapsedMs: number): number {
  return bytes / 1e6 / (elapsedMs / 1000)
}

export function ratio(value: number, baseline: number): string {
  return `${(value / baseline).toFixed(2)}×`
}

export function percent(value: number, baseline: number): string {
  return `${((value / baseline) * 100).toFixed(0)} %`
}
