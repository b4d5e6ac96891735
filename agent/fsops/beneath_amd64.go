package fsops

import "syscall"

const sysFstatat = syscall.SYS_NEWFSTATAT
