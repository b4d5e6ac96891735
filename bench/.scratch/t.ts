import { Runtime } from '../../lib/runtime.js'
const rt = new Runtime({ stateDir: '/tmp/bx/state' })
let t = performance.now()
const img = await rt.images.resolve('base')
console.log('resolve', performance.now() - t, img.rootfs)
for (let i = 0; i < 5; i++) {
  t = performance.now()
  const sb = await rt.create({ image: 'base', driver: 'namespace' })
  console.log('create', performance.now() - t)
  t = performance.now()
  const r = await sb.exec('true')
  console.log('exec', performance.now() - t, r.exitCode)
  const rec = rt.state.read(sb.id)
  console.log(rec?.pid)
  t = performance.now()
  await sb.stop()
  console.log('stop', performance.now() - t)
}
await rt.close()
