/*
 * The processes of the lease are dead, so their sockets are closed; what the kernel keeps after a
 * close is TCP state with no owner (TIME_WAIT, FIN_WAIT, a listener's unaccepted children), which
 * would keep a port busy for the next lease. sock_diag lists them and SOCK_DESTROY aborts each
 * (CAP_NET_ADMIN over the namespace, which joining its user namespace gives). Other families hold
 * nothing without an owning process (UDP, raw and unix sockets close with their last fd).
 */
#define _GNU_SOURCE
#include "reset_net.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reset_ipc.h"

#define MAX_SOCKETS 4096

struct request {
  struct nlmsghdr nlh;
  struct inet_diag_req_v2 req;
};

static int diag_socket(void) {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) reset_fail("open sock_diag: %s", strerror(errno));
  return fd;
}

/** Sends one sock_diag request about TCP sockets of `family` in any state (id: the one socket, or none). */
static void send_request(int fd, int type, int flags, int family, const struct inet_diag_sockid *id, const char *what) {
  struct request r = {0};
  r.nlh.nlmsg_len = sizeof r;
  r.nlh.nlmsg_type = (unsigned short)type;
  r.nlh.nlmsg_flags = (unsigned short)(NLM_F_REQUEST | flags);
  r.req.sdiag_family = (unsigned char)family;
  r.req.sdiag_protocol = IPPROTO_TCP;
  r.req.idiag_states = ~0U;
  if (id) r.req.id = *id;
  if (send(fd, &r, sizeof r, 0) < 0) reset_fail("%s: %s", what, strerror(errno));
}

/** Lists every TCP socket of `family` into ids; returns how many. */
static int list_tcp(int fd, int family, struct inet_diag_sockid *ids, int max) {
  send_request(fd, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, family, NULL, "sock_diag dump");
  int n = 0;
  static char buf[65536];
  for (;;) {
    ssize_t len = recv(fd, buf, sizeof buf, 0);
    if (len < 0) reset_fail("sock_diag dump: %s", strerror(errno));
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned)len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) return n;
      if (h->nlmsg_type == NLMSG_ERROR) {
        struct nlmsgerr *e = NLMSG_DATA(h);
        reset_fail("sock_diag dump: %s", strerror(-e->error));
      }
      if (n >= max) reset_fail("more than %d TCP sockets left", max);
      struct inet_diag_msg *m = NLMSG_DATA(h);
      ids[n++] = m->id;
    }
  }
}

static void destroy(int fd, int family, const struct inet_diag_sockid *id) {
  send_request(fd, SOCK_DESTROY, NLM_F_ACK, family, id, "SOCK_DESTROY");
  char buf[512];
  ssize_t len = recv(fd, buf, sizeof buf, 0);
  if (len < 0) reset_fail("SOCK_DESTROY: %s", strerror(errno));
  struct nlmsghdr *h = (struct nlmsghdr *)buf;
  if (h->nlmsg_type != NLMSG_ERROR) return;
  int err = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
  // ENOENT: it ended between the dump and now.
  if (err != 0 && err != ENOENT)
    reset_fail("SOCK_DESTROY of a TCP socket on port %u: %s", ntohs(id->idiag_sport), strerror(err));
}

/** The number after `key` in the sockstat file `name` of this thread's network namespace; -1: unreadable. */
static long sockstat_count(int proc_fd, const char *name, const char *key) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "thread-self/net/%s", name);
  int fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0) return -1;
  buf[len] = '\0';
  const char *at = strstr(buf, key);
  if (!at) return -1;
  char *end;
  long n = strtol(at + strlen(key), &end, 10);
  return end == at + strlen(key) ? -1 : n;
}

/**
 * Whether the namespace may hold a TCP socket. Its own counters say so for nothing: `inuse` counts
 * every hashed socket of the namespace (listeners and orphans included), `tw` its TIME_WAIT ones.
 * A sock_diag dump walks the host's whole TCP hash tables instead (a third of the reset's CPU on a
 * quiet host, and more with every socket the host holds). Unreadable counts: assume some.
 */
static int tcp_sockets_may_remain(int proc_fd) {
  long v4 = sockstat_count(proc_fd, "sockstat", "TCP: inuse ");
  long tw = sockstat_count(proc_fd, "sockstat", " tw ");
  long v6 = sockstat_count(proc_fd, "sockstat6", "TCP6: inuse ");
  return v4 != 0 || tw != 0 || v6 != 0;
}

void reset_net(int proc_fd) {
  if (!tcp_sockets_may_remain(proc_fd)) return;
  static struct inet_diag_sockid ids[MAX_SOCKETS];
  static const int families[] = {AF_INET, AF_INET6};
  for (unsigned f = 0; f < 2; f++) {
    int fd = diag_socket();
    int n = list_tcp(fd, families[f], ids, MAX_SOCKETS);
    for (int i = 0; i < n; i++) destroy(fd, families[f], &ids[i]);
    if (list_tcp(fd, families[f], ids, MAX_SOCKETS) != 0) reset_fail("TCP sockets are still listed after SOCK_DESTROY");
    close(fd);
  }
}
