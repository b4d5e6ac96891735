// Writing a user namespace's id map through shadow's setuid newuidmap/newgidmap (see
// idmap_helper.cc). No JavaScript: it runs on the parent's side of Launch, on any thread.
#ifndef KRUNBOX_IDMAP_HELPER_H
#define KRUNBOX_IDMAP_HELPER_H

#include <sys/types.h>

#include <string>

namespace krunbox {

// Runs `helper <pid> <inside> <outside> <count> ...` with the numbers of `map` (kernel map
// text, "inside outside count" lines) and waits for it. Returns "" when it exited 0, else
// what failed (the command line, its exit status or signal, the start of its stderr);
// *error_number and *syscall are then the errno and call that failed, or 0 and nullptr when
// the helper ran and refused.
std::string RunIdMapHelper(const std::string &helper, pid_t pid, const std::string &map, int *error_number,
                           const char **syscall);

}  // namespace krunbox

#endif
