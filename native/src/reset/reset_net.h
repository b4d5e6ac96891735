/* Step 3 of krunbox-reset: no TCP socket of the lease is left in the sandbox's network namespace. */
#ifndef KRUNBOX_RESET_NET_H
#define KRUNBOX_RESET_NET_H

/** Destroys every TCP socket (IPv4 and IPv6, any state, TIME_WAIT included) of the current network namespace; fails the
 * reset otherwise. proc_fd: the host's /proc, opened before any namespace was joined (the sandbox's is not read). */
void reset_net(int proc_fd);

#endif
