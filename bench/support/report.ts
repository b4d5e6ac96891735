/** Printing: a heading per benchmark, aligned figure lines, and targets marked ✓/✗. */

export function heading(title: string): void {
  console.log(`\n== ${title}`)
}

/** One figure: a label and its values, aligned. */
export function row(label: string, value: string): void {
  console.log(`  ${label.padEnd(52)} ${value}`)
}

/** A target line: what was wanted, what was measured, met or not. Never throws: benchmarks report. */
export function target(description: string, measured: string, met: boolean): boolean {
  console.log(`  ${met ? '✓' : '✗'} target ${description.padEnd(44)} measured ${measured}`)
  return met
}

export function note(text: string): void {
  console.log(`  · ${text}`)
}
