/*
 * The VM's user namespace. libkrun's virtio-fs server shows the guest raw
 * host uids, so a VM run by a normal user sees its image owned by that uid
 * and commands (uid 0 without capabilities) cannot write /etc. Run in a user
 * namespace mapping the host uid to 0 (as crun's krun handler does), the VMM
 * reports the files as root's. The maps come from the host's config:
 * "0 <uid> 1" for a rootless host, the user and its subordinate ids (written
 * by the setuid newuidmap/newgidmap) for a rootless host that has them, a
 * subordinate range on a root host.
 */
#ifndef KRUNBOX_SHIM_USERNS_H
#define KRUNBOX_SHIM_USERNS_H

#include <stddef.h>

/* Maps are lines "inside outside count", NULL-terminated, and must map 0.
 * newuidmap/newgidmap: absolute paths of the helpers that write them, or NULL
 * to write them directly. Returns 0 as uid/gid 0 of the new namespace, or -1
 * with errno and a message. */
int shim_enter_userns(const char *const *uid_map, const char *const *gid_map, const char *newuidmap,
                      const char *newgidmap, char *error, size_t error_size);

#endif
