#ifndef KRUNBOX_SIGNAL_NAMES_H
#define KRUNBOX_SIGNAL_NAMES_H

#include <string>

namespace krunbox {

// "SIGKILL" for 9, "SIGRTMIN+3" for real-time signals, "SIG<n>" otherwise.
// Names match Node's os.constants.signals where Node has one.
std::string SignalName(int signal_number);

}  // namespace krunbox

#endif
