package main

import "syscall"

const sysFstatat = syscall.SYS_NEWFSTATAT
