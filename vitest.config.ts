import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Wall-clock precision: run alone afterwards (vitest.timing.config.ts).
    exclude: ['test/timing/**', '**/node_modules/**'],
    // Builds dist/ once, before the test files run in parallel (CLI tests use it).
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // 2-core machines: sandboxes are real processes; keep file parallelism modest.
    maxWorkers: 2,
    minWorkers: 1,
  },
})
