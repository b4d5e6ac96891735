/**
 * OpenTelemetry spans when @opentelemetry/api is installed (an optional peer dependency);
 * without it, withSpan just calls the function and traceEnv returns nothing.
 */
import { createRequire } from 'node:module'

type OtelApi = typeof import('@opentelemetry/api')

function loadOtel(): OtelApi | null {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as OtelApi
  } catch {
    return null
  }
}

const otel = loadOtel()

/** Records a phase inside a span (create: image, spawn, boot, agent ready). */
export type MarkPhase = (phase: string) => void
const noMark: MarkPhase = () => {}

export async function withSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  fn: (mark: MarkPhase) => Promise<T>,
): Promise<T> {
  if (!otel) return fn(noMark)
  // Looked up per span: a tracer taken before the app registers its provider would stay a no-op.
  const tracer = otel.trace.getTracer('krunbox')
  return tracer.startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn((phase) => span.addEvent(phase))
    } catch (err) {
      span.recordException(err as Error)
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: (err as Error).message })
      throw err
    } finally {
      span.end()
    }
  })
}

/** TRACEPARENT for commands, so work inside the sandbox can join the caller's trace. */
export function traceEnv(): Record<string, string> {
  if (!otel) return {}
  const carrier: Record<string, string> = {}
  otel.propagation.inject(otel.context.active(), carrier)
  return carrier.traceparent ? { TRACEPARENT: carrier.traceparent } : {}
}
