import { defineConfig } from 'tsup'

export default defineConfig({
  entry: { index: 'lib/index.ts', cli: 'lib/cli/main.ts' },
  format: ['esm', 'cjs'],
  // stripInternal: the d.ts leaves out what is marked @internal (only Duplex's implementation
  // hooks of PortSocket, which a private field cannot replace; everything else internal is private).
  dts: { entry: { index: 'lib/index.ts' }, compilerOptions: { stripInternal: true } },
  target: 'node20',
  platform: 'node',
  shims: true,
  clean: true,
  sourcemap: false,
  splitting: false,
  // Class names as written (esbuild renames a class that refers to itself: err.constructor.name was _SandboxError).
  keepNames: true,
})
