/**
 * The host's reading of which proxy requests are for the sandbox's own loopback
 * (lib/network/own-loopback.ts) is the relay's (agent/egress/local.go ownLoopback, whose cases
 * agent/egress/handoff_test.go holds): what the host hands back the relay serves, and what it
 * keeps goes to the policy, which refuses the host's loopback in any spelling.
 */
import { describe, expect, it } from 'vitest'
import { OwnLoopback } from '../../lib/network/own-loopback.js'

const none = new OwnLoopback([])
const named = new OwnLoopback([{ net: '127.0.0.1/32', port: 5432 }])

describe('own loopback', () => {
  it.each([
    ['GET', 'http://127.0.0.1:8080/x?y'],
    ['GET', 'http://LOCALHOST.:8080/'],
    ['GET', 'http://localhost/'],
    ['GET', 'http://127.9.9.9/'],
    ['GET', 'http://0.0.0.0:80/'],
    ['GET', 'http://[::1]:8080/'],
    ['GET', 'HTTP://user@127.0.0.1:8080/'],
    ['CONNECT', '[::ffff:127.0.0.1]:8080'],
    ['CONNECT', '[::]:443'],
    ['CONNECT', 'localhost:443'],
  ])('own loopback: %s %s is the sandbox’s', (method, target) => {
    expect(none.has(method, target)).toBe(true)
  })

  it.each([
    // Spellings a URL parser would make loopback, the relay's does not: the host's policy refuses them.
    ['GET', 'http://127.1:8080/'],
    ['GET', 'http://2130706433/'],
    ['GET', 'http://0x7f000001/'],
    ['GET', 'http://[::1%25lo]/'],
    ['GET', 'http://example.test/'],
    ['GET', 'https://127.0.0.1/'],
    ['GET', '/origin-form'],
    ['CONNECT', '127.0.0.1'],
    ['CONNECT', '::1:443'],
    ['CONNECT', '192.0.2.1:443'],
  ])('own loopback: %s %s is not', (method, target) => {
    expect(none.has(method, target)).toBe(false)
  })

  it('own loopback: the host loopback address and port the policy names are the host’s, other ports stay the sandbox’s', () => {
    expect(named.has('GET', 'http://127.0.0.1:5432/')).toBe(false)
    expect(named.has('CONNECT', '127.0.0.1:5432')).toBe(false)
    expect(named.has('GET', 'http://127.0.0.1:5433/')).toBe(true)
    expect(named.has('GET', 'http://127.0.0.2:5432/')).toBe(true)
  })
})
