/**
 * Host memory of a process tree, read from /proc: RSS (VmRSS), PSS and private bytes
 * (smaps_rollup). RSS counts shared pages (the agent binary, bwrap's libraries) once per
 * process; PSS splits them between the processes sharing them, so sums of PSS add up.
 */
import fs from 'node:fs'

export interface ProcMemory {
  pid: number
  comm: string
  rssBytes: number
  pssBytes: number
  privateBytes: number
}

function parentOf(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  } catch {
    return null
  }
}

/** Map of parent pid → child pids over every process on the host, read once. */
export function processChildren(): Map<number, number[]> {
  const children = new Map<number, number[]>()
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const pid = Number(name)
    const ppid = parentOf(pid)
    if (ppid === null) continue
    const list = children.get(ppid) ?? []
    list.push(pid)
    children.set(ppid, list)
  }
  return children
}

/** The pid and all its descendants. */
export function processTree(root: number, children = processChildren()): number[] {
  const out: number[] = []
  const stack = [root]
  while (stack.length > 0) {
    const pid = stack.pop()!
    out.push(pid)
    stack.push(...(children.get(pid) ?? []))
  }
  return out
}

function kbField(text: string, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)
  return m ? Number(m[1]) * 1024 : 0
}

export function processMemory(pid: number): ProcMemory | null {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
    const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8')
    return {
      pid,
      comm: fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim(),
      rssBytes: kbField(status, 'VmRSS'),
      pssBytes: kbField(rollup, 'Pss'),
      privateBytes: kbField(rollup, 'Private_Clean') + kbField(rollup, 'Private_Dirty'),
    }
  } catch {
    return null
  }
}

export interface TreeMemory {
  processes: ProcMemory[]
  rssBytes: number
  pssBytes: number
  privateBytes: number
}

/** Memory of every process in the tree under root. */
export function treeMemory(root: number, children = processChildren()): TreeMemory {
  const processes = processTree(root, children)
    .map(processMemory)
    .filter((p): p is ProcMemory => p !== null)
  return {
    processes,
    rssBytes: processes.reduce((a, p) => a + p.rssBytes, 0),
    pssBytes: processes.reduce((a, p) => a + p.pssBytes, 0),
    privateBytes: processes.reduce((a, p) => a + p.privateBytes, 0),
  }
}
