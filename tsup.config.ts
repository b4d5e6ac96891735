import { defineConfig } from 'tsup'

export default defineConfig({
  entry: { index: 'lib/index.ts', cli: 'lib/cli/main.ts' },
  format: ['esm', 'cjs'],
  dts: { entry: { index: 'lib/index.ts' } },
  target: 'node20',
  platform: 'node',
  shims: true,
  clean: true,
  sourcemap: false,
  splitting: false,
})
