// An "AI code interpreter" loop: code a model wrote runs in a python sandbox with a timeout,
// with files going in and out. The model is stood in for by a fixed list of snippets; one of
// them never ends, and its timeout is a result the loop reports, not a crash.
//   node examples/code-interpreter.mjs
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox } from 'krunbox'

const snippets = [
  // 1. Reads the uploaded data set and writes a summary file.
  `import csv, json
rows = list(csv.DictReader(open('/workspace/in/sales.csv')))
total = sum(int(r['amount']) for r in rows)
json.dump({'rows': len(rows), 'total': total}, open('/workspace/out/summary.json', 'w'))
print(f'{len(rows)} rows, total {total}')`,
  // 2. A bug: the loop reports the traceback, as it would feed it back to the model.
  `print(1 / 0)`,
  // 3. Never ends: stopped by the timeout.
  `while True: pass`,
]

const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'interpreter-out-'))
const sb = await Sandbox.create({ image: 'python', memoryMb: 256 })
try {
  await sb.fs.mkdir('/workspace/in', { parents: true })
  await sb.fs.mkdir('/workspace/out', { parents: true })
  await sb.fs.writeFile('/workspace/in/sales.csv', 'region,amount\nnorth,120\nsouth,80\neast,42\n')
  for (const [i, code] of snippets.entries()) {
    await sb.fs.writeFile('/workspace/cell.py', code)
    const r = await sb.exec('python3', ['/workspace/cell.py'], { timeoutMs: 2_000, killGraceMs: 200 })
    const outcome = r.timedOut ? 'timed out' : r.exitCode === 0 ? 'ok' : `failed (exit ${r.exitCode})`
    console.log(`cell ${i + 1}: ${outcome} in ${r.durationMs} ms`)
    if (r.stdout) console.log(`  stdout: ${r.stdout.trim()}`)
    if (r.stderr) console.log(`  stderr: ${r.stderr.trim().split('\n').at(-1)}`)
  }
  // Files out: everything the cells wrote under /workspace/out.
  await sb.fs.download('/workspace/out', outDir)
  for (const name of fs.readdirSync(outDir))
    console.log(`file out: ${name}: ${fs.readFileSync(path.join(outDir, name), 'utf8')}`)
} finally {
  await sb.stop()
  fs.rmSync(outDir, { recursive: true, force: true })
}
