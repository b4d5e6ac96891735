// An "AI code interpreter" loop: cells a model wrote run one after the other in a Python kernel
// that keeps its state (sb.runCode), with files going in and out. The model is stood in for by a
// fixed list of cells; one raises, one never ends, and both are results the loop reports (the
// traceback and the timeout are what it would feed back to the model), not crashes.
//   node examples/code-interpreter.mjs
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox } from 'krunbox'

const cells = [
  // 1. Reads the uploaded data set; `rows` and `total` stay defined for the next cells.
  `import csv, json
rows = list(csv.DictReader(open('/workspace/in/sales.csv')))
total = sum(int(r['amount']) for r in rows)
print(f'{len(rows)} rows, total {total}')`,
  // 2. Uses them, writes a file out, and shows a chart: it comes back as PNG bytes.
  `json.dump({'rows': len(rows), 'total': total}, open('/workspace/out/summary.json', 'w'))
import matplotlib.pyplot as plt
plt.bar([r['region'] for r in rows], [int(r['amount']) for r in rows])`,
  // 3. A bug.
  `print(1 / 0)`,
  // 4. Never ends: interrupted at its timeout; the kernel and its state survive.
  `while True: pass`,
  // 5. The state is still there.
  `total`,
]

const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'interpreter-out-'))
const sb = await Sandbox.create({ image: 'code-interpreter', memoryMb: 1024 })
try {
  await sb.fs.mkdir('/workspace/in', { parents: true })
  await sb.fs.mkdir('/workspace/out', { parents: true, mode: 0o777 })
  await sb.fs.writeFile('/workspace/in/sales.csv', 'region,amount\nnorth,120\nsouth,80\neast,42\n')
  for (const [i, code] of cells.entries()) {
    const run = await sb.runCode(code, { timeoutMs: 5_000 })
    const outcome = run.timedOut ? 'timed out' : run.error ? `raised ${run.error.name}` : 'ok'
    console.log(`cell ${i + 1}: ${outcome} in ${run.durationMs} ms`)
    if (run.logs.stdout.length > 0) console.log(`  stdout: ${run.logs.stdout.join('').trim()}`)
    if (run.error && !run.timedOut) console.log(`  error: ${run.error.name}: ${run.error.value}`)
    if (run.text !== undefined) console.log(`  value: ${run.text}`)
    for (const result of run.results.filter((r) => r.png)) console.log(`  chart: ${result.png.length} bytes of PNG`)
  }
  // Files out: everything the cells wrote under /workspace/out.
  await sb.fs.download('/workspace/out', outDir)
  for (const name of fs.readdirSync(outDir))
    console.log(`file out: ${name}: ${fs.readFileSync(path.join(outDir, name), 'utf8')}`)
} finally {
  await sb.stop()
  fs.rmSync(outDir, { recursive: true, force: true })
}
