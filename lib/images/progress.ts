/**
 * Build progress: stages map to fixed slices of 0–100 and the reported percent never goes
 * down. mmdebstrap's verbose output (apt's "Get:" lines, its own "I:" lines) moves the bar
 * through resolve, download and extract; the post-steps report the rest.
 */
import type { ProgressEvent, ProgressListener, ProgressStage } from './types.js'

const SLICES: Record<ProgressStage, [number, number]> = {
  resolve: [0, 12],
  download: [12, 55],
  extract: [55, 72],
  trim: [72, 80],
  compile: [80, 92],
  finalize: [92, 100],
}

const ORDER: ProgressStage[] = ['resolve', 'download', 'extract', 'trim', 'compile', 'finalize']

export class ProgressReporter {
  private stageIndex = 0
  private lastStage: ProgressStage | null = null
  private percent = 0

  constructor(private readonly listener: ProgressListener | undefined) {}

  /** Reports `fraction` (0–1) of `stage`. Stages before the current one are ignored. */
  report(stage: ProgressStage, fraction = 0): void {
    const index = ORDER.indexOf(stage)
    if (index < this.stageIndex) return
    this.stageIndex = index
    const [from, to] = SLICES[stage]
    const clamped = Math.min(1, Math.max(0, fraction))
    const percent = Math.max(this.percent, Math.floor(from + (to - from) * clamped))
    // Emit on a new stage or a higher percent; repeats are noise.
    if (stage === this.lastStage && percent === this.percent) return
    this.lastStage = stage
    this.percent = percent
    this.emit({ stage, percent })
  }

  /** A layer's bytes (OCI pulls): emitted even when the overall percent did not move. */
  reportLayer(stage: ProgressStage, fraction: number, layer: NonNullable<ProgressEvent['layer']>): void {
    const index = ORDER.indexOf(stage)
    if (index < this.stageIndex) return
    this.stageIndex = index
    const [from, to] = SLICES[stage]
    this.percent = Math.max(this.percent, Math.floor(from + (to - from) * Math.min(1, Math.max(0, fraction))))
    this.lastStage = stage
    this.emit({ stage, percent: this.percent, layer })
  }

  /** The build is complete: always ends with finalize at 100. */
  done(): void {
    this.stageIndex = ORDER.length - 1
    if (this.lastStage === 'finalize' && this.percent === 100) return
    this.lastStage = 'finalize'
    this.percent = 100
    this.emit({ stage: 'finalize', percent: 100 })
  }

  private emit(event: ProgressEvent): void {
    try {
      this.listener?.(event)
    } catch {
      // A failing listener must not fail the build.
    }
  }
}

/**
 * Follows mmdebstrap -v output line by line. Package counts come from apt's summary
 * ("N newly installed"), so download progress is the share of "Get:" lines seen. A Debian
 * build (variant apt) then installs the essential set and the remaining packages: the extract
 * slice moves with dpkg's "Setting up" lines against the count of each of those summaries.
 */
export class MmdebstrapProgress {
  private phase: 'start' | 'update' | 'download' | 'extract' | 'essential' | 'remaining' = 'start'
  private updateGets = 0
  private packageCount = 0
  private downloadGets = 0
  private remainingCount = 0
  private setUp = 0

  constructor(private readonly reporter: ProgressReporter) {}

  /** Where each part of the extract slice starts: unpacking, the essential set, the rest. */
  private static readonly EXTRACT_PARTS = { essential: [0.1, 0.45], remaining: [0.45, 1] } as const

  line(text: string): void {
    if (text.startsWith('I: running apt-get update')) {
      this.phase = 'update'
      this.reporter.report('resolve', 0.1)
    } else if (text.startsWith('I: downloading packages')) {
      this.phase = 'download'
      this.reporter.report('resolve', 0.8)
    } else if (text.startsWith('I: extracting archives')) {
      this.phase = 'extract'
      this.reporter.report('extract', 0)
    } else if (text.startsWith('I: installing essential packages')) {
      this.enter('essential')
    } else if (text.startsWith('I: installing remaining packages')) {
      this.enter('remaining')
    } else if (/^I: (cleaning package lists|skipping cleanup|success)/.test(text)) {
      this.reporter.report('extract', 1)
    } else if (this.phase === 'update' && text.startsWith('Get:')) {
      // The number of index files is not announced; creep towards the end of the slice.
      this.updateGets += 1
      this.reporter.report('resolve', 0.1 + 0.6 * (1 - 1 / (1 + this.updateGets / 3)))
    } else if (this.phase === 'download') {
      const summary = /^\d+ upgraded, (\d+) newly installed/.exec(text)
      if (summary !== null) {
        this.packageCount = Number(summary[1])
        this.reporter.report('download', 0)
      } else if (text.startsWith('Get:') && this.packageCount > 0) {
        this.downloadGets += 1
        this.reporter.report('download', this.downloadGets / this.packageCount)
      } else if (text.startsWith('Fetched ')) {
        this.reporter.report('download', 1)
      }
    } else if (this.phase === 'essential' || this.phase === 'remaining') {
      const summary = /^\d+ upgraded, (\d+) newly installed/.exec(text)
      if (summary !== null && this.phase === 'remaining') this.remainingCount = Number(summary[1])
      if (!text.startsWith('Setting up ')) return
      this.setUp += 1
      const total = this.phase === 'essential' ? this.packageCount : this.remainingCount
      const [from, to] = MmdebstrapProgress.EXTRACT_PARTS[this.phase]
      if (total > 0) this.reporter.report('extract', from + (to - from) * Math.min(1, this.setUp / total))
    }
  }

  private enter(phase: 'essential' | 'remaining'): void {
    this.phase = phase
    this.setUp = 0
    this.reporter.report('extract', MmdebstrapProgress.EXTRACT_PARTS[phase][0])
  }
}
